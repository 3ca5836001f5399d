package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/meshnode/meshnode/records"
)

// A member named an offender by only half of a plan (two colluders of four: the two
// honest members name them, and two is not more than half) stays in the plan on the
// reporters' word alone, since two liars could name two honest members the same way.
// What breaks the tie is evidence the leader checks itself: the signed contributions of
// the synchronisation that dropped the member, which the leader re-scores with the
// workers' own code (parallel.VerifyEvidence). The leader commits its verdict stamped
// with its own ID, as it does speed proofs: no RPC operation forwards one, so no member
// can write a verdict, only ship evidence for the leader to judge.

// MaxVerdictsPerJob bounds the verdicts a job keeps; past it the oldest is dropped.
const MaxVerdictsPerJob = 64

// VerdictRequest commits a verdict on job JobID (VerdictType).
type VerdictRequest struct {
	JobID   string  `json:"job_id"`
	Verdict Verdict `json:"verdict"`
}

func validateVerdict(v records.Verdict) error {
	errs := []error{checkNodeID("verdict member", v.Member), checkNodeID("verdict accuser", v.Accuser),
		checkNodeID("verdict by", v.By), checkLen("verdict reason", v.Reason, maxMessageLen)}
	if v.Member == v.Accuser {
		errs = append(errs, fmt.Errorf("verdict: member %s accused itself", v.Member))
	}
	if v.Step < 0 {
		errs = append(errs, fmt.Errorf("verdict step %d: negative", v.Step))
	}
	if v.Time.IsZero() {
		errs = append(errs, errors.New("verdict time: unset"))
	}
	return errors.Join(errs...)
}

func (r VerdictRequest) validate() error {
	return errors.Join(checkJobID("verdict job id", r.JobID), validateVerdict(r.Verdict))
}

func (f *FSM) applyVerdict(req VerdictRequest) any {
	j, err := f.liveJob(req.JobID)
	if err != nil {
		return err
	}
	j.Verdicts = appendVerdict(j.Verdicts, req.Verdict)
	return nil
}

// appendVerdict keeps at most MaxVerdictsPerJob verdicts and never lets acquittals push a
// conviction out: a plan member may ship a false accusation every EvidenceInterval, and
// with the oldest simply dropped 64 of them (about 11 minutes) would have flushed out the
// verdict that keeps its convicted partner out of the plan. A member convicted already is
// not recorded again. Past the bound the oldest acquittal goes, and only when every kept
// verdict convicts, the oldest conviction.
func appendVerdict(vs []records.Verdict, v records.Verdict) []records.Verdict {
	if v.Convicted && slices.ContainsFunc(vs, func(o records.Verdict) bool { return o.Convicted && o.Member == v.Member }) {
		return vs
	}
	if len(vs) < MaxVerdictsPerJob {
		return append(vs, v)
	}
	drop := slices.IndexFunc(vs, func(o records.Verdict) bool { return !o.Convicted })
	if drop < 0 {
		drop = 0
	}
	out := make([]records.Verdict, 0, MaxVerdictsPerJob)
	out = append(append(out, vs[:drop]...), vs[drop+1:]...)
	return append(out, v)
}

// RecordVerdict commits v on job jobID as this leader's: By and Time are set here. It
// fails with ErrNotLeader on any other node (a verdict is never forwarded).
func (c *Consensus) RecordVerdict(ctx context.Context, jobID string, v Verdict) error {
	if !c.IsLeader() {
		return ErrNotLeader
	}
	v.By, v.Time = c.host.ID().String(), now()
	v.Reason = truncate(v.Reason, maxMessageLen)
	req := VerdictRequest{JobID: jobID, Verdict: v}
	if err := req.validate(); err != nil {
		return err
	}
	res, err := c.propose(ctx, VerdictType|IgnoreUnknownTypeFlag, req)
	if err != nil {
		return err
	}
	if err, ok := res.(error); ok {
		return err
	}
	return nil
}
