package consensus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Offender evidence travels from the worker that dropped a member to the leader over the
// RPC channel (authenticated by the libp2p connection; docs/security.md, "Verifiable
// offender evidence"). The leader checks it with a judge the node installs
// (SetEvidenceJudge: parallel.VerifyEvidence on the job's model and data) and commits
// its verdict itself (RecordVerdict): the reporter's word is never written as a verdict.

// MaxEvidenceBytes bounds one evidence message: what fits an RPC request once encoded
// (base64 in JSON). A larger evidence (a model over ~90k weights with four replicas) is
// not shipped this way.
const MaxEvidenceBytes = (MaxRPCRequestBytes - 64<<10) * 3 / 4

// EvidenceInterval is how often one reporter may have evidence judged: a check costs the
// leader a forward pass per contribution and held-out window.
const EvidenceInterval = 10 * time.Second

// ErrBusy means the leader refused a request for its rate: one in flight per reporter, and
// one per EvidenceInterval.
var ErrBusy = errors.New("too many requests from this peer")

// EvidenceRequest ships a worker's evidence against Member of job JobID (the bytes of a
// parallel.Evidence).
type EvidenceRequest struct {
	JobID    string `json:"job_id"`
	Member   string `json:"member"`
	Evidence []byte `json:"evidence"`
}

// EvidenceJudge checks evidence reporter shipped against member of job j: convicted when
// the leader's recomputation drops member; false with the reason when the evidence does
// not convict or is forged (a false accusation); an error when it cannot be checked at
// all (malformed, or the leader cannot load the job's data).
type EvidenceJudge func(ctx context.Context, j Job, reporter, member string, evidence []byte) (convicted bool, reason string, err error)

// evidenceDesk is the leader's judge and the time each reporter last had evidence judged.
type evidenceDesk struct {
	mu    sync.Mutex
	judge EvidenceJudge
	last  map[peer.ID]time.Time
	busy  map[peer.ID]bool
}

// SetEvidenceJudge installs the judge this node uses when it leads; without one, evidence
// is refused.
func (c *Consensus) SetEvidenceJudge(j EvidenceJudge) {
	c.evidence.mu.Lock()
	defer c.evidence.mu.Unlock()
	c.evidence.judge = j
}

// ShipEvidence sends evidence against member of job jobID to the leader, which judges it
// and commits its verdict.
func (c *Consensus) ShipEvidence(ctx context.Context, jobID, member string, evidence []byte) error {
	if len(evidence) > MaxEvidenceBytes {
		return fmt.Errorf("evidence of %d bytes (max %d): %w", len(evidence), MaxEvidenceBytes, ErrTooLarge)
	}
	return c.do(ctx, "evidence", EvidenceRequest{JobID: jobID, Member: member, Evidence: evidence}, nil)
}

// take admits one judgement for reporter now, or refuses it (ErrBusy); done ends it.
func (d *evidenceDesk) take(reporter peer.ID, now time.Time) (EvidenceJudge, func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.judge == nil {
		return nil, nil, fmt.Errorf("%w: this leader judges no evidence", ErrForbidden)
	}
	if d.last == nil {
		d.last, d.busy = map[peer.ID]time.Time{}, map[peer.ID]bool{}
	}
	if d.busy[reporter] || now.Sub(d.last[reporter]) < EvidenceInterval {
		return nil, nil, fmt.Errorf("%w: evidence from %s judged less than %s ago", ErrBusy, reporter, EvidenceInterval)
	}
	d.busy[reporter], d.last[reporter] = true, now
	if len(d.last) > 4*MaxSpeedProofs { // bounded: forget the oldest reporters
		for id, t := range d.last {
			if now.Sub(t) >= EvidenceInterval && !d.busy[id] {
				delete(d.last, id)
			}
		}
	}
	return d.judge, func() {
		d.mu.Lock()
		delete(d.busy, reporter)
		d.mu.Unlock()
	}, nil
}

func (c *Consensus) handleEvidence(ctx context.Context, from peer.ID, body []byte) (any, error) {
	if len(body) > MaxRPCRequestBytes {
		return nil, ErrTooLarge
	}
	args, err := decodeArgs[EvidenceRequest](body)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if len(args.Evidence) > MaxEvidenceBytes {
		return nil, fmt.Errorf("evidence of %d bytes (max %d): %w", len(args.Evidence), MaxEvidenceBytes, ErrTooLarge)
	}
	if err := c.authorizeReporter(from, args.JobID); err != nil {
		return nil, err
	}
	j, _, err := c.fsm.Job(args.JobID)
	if err != nil {
		return nil, err
	}
	p := j.CurrentPlan()
	if p == nil || args.Member == from.String() || !slices.Contains(planNodes(p.Plan), args.Member) {
		return nil, fmt.Errorf("%w: %q is not another node of job %s's current plan", ErrForbidden, args.Member, args.JobID)
	}
	judge, done, err := c.evidence.take(from, now())
	if err != nil {
		return nil, err
	}
	defer done()
	convicted, reason, err := judge(ctx, j, from.String(), args.Member, args.Evidence)
	if err != nil {
		return nil, fmt.Errorf("%w: evidence against %s: %v", ErrBadRequest, args.Member, err)
	}
	v := Verdict{Member: args.Member, Accuser: from.String(), Convicted: convicted, Epoch: p.Epoch, Reason: reason}
	if !convicted {
		c.log.Warn("false offender accusation", "job", args.JobID, "accuser", from, "member", args.Member, "reason", reason)
	}
	return struct{}{}, c.RecordVerdict(ctx, args.JobID, v)
}
