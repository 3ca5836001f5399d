package runner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// EvidenceShipper is a Control that can ship a worker's offender evidence to the leader
// (the node's: consensus.ShipEvidence). Without it evidence stays with the worker.
type EvidenceShipper interface {
	ShipEvidence(ctx context.Context, jobID, member string, evidence []byte) error
}

// shipEvidence sends the worker's evidence against each member it just named to the
// leader, in the background: the leader's check takes a forward pass per contribution
// and held-out window, and the step must not wait for it. Evidence past the RPC's bound
// (consensus.MaxEvidenceBytes) travels as a blob (the node's shipper); past
// consensus.MaxEvidenceBlobBytes it is not shipped.
func (t *training) shipEvidence(named []string) {
	ship, ok := t.r.cfg.Control.(EvidenceShipper)
	if !ok || t.w == nil {
		return
	}
	var evs []namedEvidence
	for _, m := range named {
		ev := t.w.Evidence(m)
		if ev == nil {
			continue
		}
		raw := ev.Marshal()
		if int64(len(raw)) > consensus.MaxEvidenceBlobBytes {
			t.r.log.Info("offender evidence too large to ship", "job", t.job.ID, "member", m, "bytes", len(raw))
			continue
		}
		evs = append(evs, namedEvidence{member: m, raw: raw})
	}
	if len(evs) == 0 {
		return
	}
	t.r.wg.Go(func() {
		shipInTurn(t.r.ctx, func(ctx context.Context, member string, raw []byte) error {
			return ship.ShipEvidence(ctx, t.job.ID, member, raw)
		}, evs, evidenceRetry, func(member string, err error) {
			t.r.log.Warn("ship offender evidence", "job", t.job.ID, "member", member, "err", err)
		})
	})
}

// namedEvidence is a worker's evidence against member, marshalled.
type namedEvidence struct {
	member string
	raw    []byte
}

// evidenceRetry is how long a shipment the leader refused for its rate (consensus.ErrBusy)
// waits before it is sent again: the leader judges one evidence per reporter per
// consensus.EvidenceInterval, and a worker that names two colluders of four at once has
// two to ship. Dropping the second, as shipping both at once did, left that colluder in
// the plan for good, since a worker names each member once.
var evidenceRetry = consensus.EvidenceInterval

// evidenceTries bounds how often one shipment is refused for the rate before it is given up.
const evidenceTries = 6

// shipInTurn ships evs one after the other, each within a minute, waiting wait and trying
// again while the leader refuses for its rate; any other failure is logged and the next
// evidence goes on.
func shipInTurn(ctx context.Context, ship func(ctx context.Context, member string, raw []byte) error, evs []namedEvidence, wait time.Duration, logf func(member string, err error)) {
	for _, ev := range evs {
		for try := 1; ; try++ {
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := ship(sctx, ev.member, ev.raw)
			cancel()
			if err == nil {
				break
			}
			if !errors.Is(err, consensus.ErrBusy) || try >= evidenceTries {
				logf(ev.member, err)
				break
			}
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}
}

// evidencePlan is job j's plan of frame epoch e (the epoch an evidence's collective ran
// in) and that plan epoch; nil when j no longer records it.
func evidencePlan(j consensus.Job, e uint32) (*scheduler.JobPlan, uint64) {
	for i := range j.Plans {
		if pe := &j.Plans[i]; uint32(pe.Epoch) == e {
			return scheduler.PlanFromRecord(pe), pe.Epoch
		}
	}
	return nil, 0
}

// JudgeEvidence is the leader's check of evidence reporter shipped against member of job
// j (consensus.EvidenceJudge): the job's engine configuration under the plan of the
// evidence's epoch,
// the reporter's dataset (the job's blob, fetched and verified by content hash where this
// node lacks it, with the reporter's shards), and parallel.VerifyEvidence. Forged
// evidence, or evidence re-scored from anchors only the reporter vouches for
// (parallel.ErrUnboundAnchors), is a false accusation (not convicted, with the reason),
// not an error; evidence that does not decode is an error wrapping
// consensus.ErrMalformedEvidence (the leader then disconnects the reporter).
func (r *Runner) JudgeEvidence(ctx context.Context, j consensus.Job, reporter, member string, evidence []byte) (bool, string, error) {
	ev, err := parallel.UnmarshalEvidence(evidence)
	if err != nil { // no honest worker ships it: the leader disconnects the reporter
		return false, "", fmt.Errorf("%w: %w", consensus.ErrMalformedEvidence, err)
	}
	// The evidence is held to the plan of its own epoch, which the job may have left since
	// (a first conviction replans it): the signatures bind that epoch, so evidence cannot
	// borrow another epoch's plan.
	jp, epoch := evidencePlan(j, ev.Epoch)
	if jp == nil {
		return false, "", fmt.Errorf("job %s records no plan of the evidence's epoch %d", j.ID, ev.Epoch)
	}
	if !jp.Has(reporter) || !jp.Has(member) {
		return false, fmt.Sprintf("evidence of epoch %d, whose plan does not hold both %s and %s", ev.Epoch, reporter, member), nil
	}
	cfg := jobConfig(j, epoch, *jp)
	cfg.Train.OffloadDir = filepath.Join(r.cfg.DataDir, "offload") // as the reporter's worker was built (train)
	if j.Spec.Model.InitBlob != "" && cfg.Train.LoRA != nil {
		if cfg.Train.Init, err = r.initFile(ctx, j.Spec.Model.InitBlob); err != nil {
			return false, "", err
		}
	}
	if j.Spec.Data.Blob == "" {
		return false, "", fmt.Errorf("job %s names no dataset blob: its data cannot be the reporter's", j.ID)
	}
	data, err := r.cfg.Datasets.LoadDataset(ctx, j.Spec.Data.Blob, replicaShards(*jp, reporter))
	if err != nil {
		return false, "", fmt.Errorf("job %s's dataset: %w", j.ID, err)
	}
	convicted, why, err := parallel.VerifyEvidence(cfg, EnginePlan(jp.BuiltPlan()), data, ev, member)
	if errors.Is(err, parallel.ErrForgedEvidence) || errors.Is(err, parallel.ErrUnboundAnchors) {
		return false, err.Error(), nil
	}
	return convicted, why, err
}
