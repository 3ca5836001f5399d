package consensus

import (
	"context"
	"errors"
	"fmt"

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
	j.Verdicts = appendBounded(j.Verdicts, MaxVerdictsPerJob, req.Verdict)
	return nil
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
