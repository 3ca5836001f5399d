package runner

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// training is one worker's run through parallel.TrainLoop: it is the loop's Stepper (the
// worker, timed for progress) and its hooks.
type training struct {
	r     *Runner
	job   consensus.Job
	epoch uint64
	jp    scheduler.JobPlan
	// ckptEpoch is the epoch this worker's checkpoints are recorded under: the start of
	// its chain of in-place epochs (scheduler.CheckpointEpoch), the same on every stage.
	ckptEpoch uint64
	steps     int // the schedule's total steps
	w         *parallel.Worker
	p         *progress
	// follower hands over the in-place epochs that follow epoch (nil: none will);
	// evaluates says whether this worker computes the validation loss.
	follower  *follower
	evaluates bool
	// joining says the worker rejoined in place and has not yet been admitted into its
	// outer steps' quorum (recorded as EventRejoined once it is).
	joining bool
	// local describes this node's own dataset of a data.local job (empty otherwise):
	// every replica then evaluates on its own validation split and records the loss.
	local *localData

	val      *float64 // the latest validation loss
	lastCkpt int      // the step of the latest checkpoint started
	// stored is closed once the checkpoint being written is stored, replicated and
	// committed; nil when none is in flight.
	stored chan struct{}
	writes sync.WaitGroup
}

func newTraining(r *Runner, j consensus.Job, epoch uint64, jp scheduler.JobPlan, cfg parallel.JobConfig, w *parallel.Worker) *training {
	global := 0
	for _, b := range jp.Batches {
		global += b
	}
	if global == 0 {
		global = cfg.Train.Batch * len(jp.Replicas)
	}
	report, evaluates := roles(jp, r.cfg.Self)
	p := &progress{control: r.cfg.Control, job: j.ID, self: r.cfg.Self, epoch: epoch, report: report, members: len(jp.Nodes()), tokens: global * cfg.Train.Model.Context}
	return &training{r: r, job: j, epoch: epoch, jp: jp, ckptEpoch: scheduler.CheckpointEpoch(JobView(j), epoch),
		steps: cfg.Train.Steps, w: w, p: p, lastCkpt: w.StepsDone(), evaluates: evaluates}
}

// followEpoch takes over the latest in-place epoch, if one came: its number for what the
// training reports, its plan for the checkpoints' copies, and the roles it gives this
// node (the first replica may be another now). The tokens per step stay the plan's at
// the start: the replicas left go on with their own batches.
func (t *training) followEpoch() {
	if t.follower == nil {
		return
	}
	epoch, jp := t.follower.current()
	if epoch == t.epoch {
		return
	}
	t.epoch, t.jp, t.p.epoch = epoch, jp, epoch
	t.p.report, t.evaluates = roles(jp, t.r.cfg.Self)
	t.p.members = len(jp.Nodes())
}

// StepsDone implements parallel.Stepper.
func (t *training) StepsDone() int { return t.w.StepsDone() }

// Step implements parallel.Stepper: one step of the worker, timed for the progress samples.
func (t *training) Step(ctx context.Context) (float64, error) {
	start := time.Now()
	res, err := t.w.Step(ctx)
	if err != nil {
		return 0, err
	}
	t.r.cfg.Metrics.ObserveStep(t.job.ID, res.Times)
	t.reportIntegrity(ctx, res)
	t.reportAdmission()
	t.p.step(time.Since(start), res.Times)
	return res.Loss, nil
}

// localData is the local dataset a data.local replica trains on: its name and sizes.
type localData struct {
	name                   string
	trainTokens, valTokens int
}

// evaluate is the evaluation hook: the first replica's validation loss and the job's traffic,
// reported at once. In a data.local job every replica evaluates on its own node's
// validation split and records it (EventLocalEval).
func (t *training) evaluate(ctx context.Context, step int, loss float64) error {
	t.followEpoch()
	var val *float64
	if t.evaluates || t.local != nil {
		v, ok, err := t.w.Evaluate(ctx)
		if err != nil {
			return err
		}
		if ok && t.local != nil {
			t.recordLocalEval(ctx, step, v)
		}
		if ok && t.evaluates {
			val = &v
		}
	}
	traffic, err := t.w.GatherTraffic(ctx)
	if err != nil {
		return err
	}
	t.val = val
	return t.p.add(ctx, step, loss, val, traffic, true)
}

// recordLocalEval records a data.local replica's validation loss on its own data; a
// failure to record it is logged, not fatal to training.
func (t *training) recordLocalEval(ctx context.Context, step int, loss float64) {
	msg := jobspec.LocalEvalMessage(t.local.name, t.local.trainTokens, t.local.valTokens, loss)
	if err := t.r.cfg.Control.AddEvent(ctx, t.job.ID, consensus.NewEvent(consensus.EventLocalEval, t.epoch, step, msg)); err != nil && ctx.Err() == nil {
		t.r.log.Warn("record a local evaluation", "job", t.job.ID, "step", step, "err", err)
	}
}

// progress is the hook of the other steps: a sample at most every progressEvery.
func (t *training) progress(ctx context.Context, step int, loss float64) error {
	t.followEpoch()
	return t.p.add(ctx, step, loss, nil, -1, false)
}

// checkpoint is the checkpoint hook. Checkpoints land on the first step at or after each
// multiple of checkpoint.every where the replicas agree: every such step in sync mode,
// the next outer step in DiLoCo. A checkpoint is written beside the next step's forward
// and backward passes; that step applies its update only once the write, its replica on
// another node and its manifest are done (gate), so the job never runs more than
// checkpoint.every steps past a checkpoint that survives any one node.
func (t *training) checkpoint(ctx context.Context, step int) error {
	t.followEpoch()
	every := t.job.Spec.Checkpoint.Every
	if every <= 0 || step/every <= t.lastCkpt/every || !t.w.Consistent() || step >= t.steps {
		return nil
	}
	t.lastCkpt = step
	snap, err := t.w.Snapshot() // a copy: the write runs beside training
	if err != nil {
		return fmt.Errorf("checkpoint at step %d: %w", step, err)
	}
	done := make(chan struct{})
	t.stored = done
	t.writes.Add(1)
	// Under the chain's epoch, not t.epoch: a stage that took an in-place epoch over
	// before this step writes the same checkpoint as one that did not yet.
	epoch, jp := t.ckptEpoch, t.jp // followEpoch may change jp while the write runs
	go func() {
		defer t.writes.Done()
		defer close(done)
		err := t.r.writeCheckpoint(ctx, t.job.ID, epoch, jp, t.job.Spec.Checkpoint.Keep, snap)
		if err != nil && ctx.Err() == nil {
			t.r.log.Warn("checkpoint", "job", t.job.ID, "step", snap.Step, "err", err)
		}
	}()
	return nil
}

// gate is the worker's update gate: it holds a step's update until the checkpoint in
// flight is stored.
func (t *training) gate(ctx context.Context, _ int) error {
	if t.stored == nil {
		return nil
	}
	select {
	case <-t.stored:
		t.stored = nil
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish records the end of the job, by the worker that reports progress.
func (t *training) finish(ctx context.Context) error {
	t.followEpoch()
	if !t.p.report {
		return nil
	}
	msg := fmt.Sprintf("finished %d steps", t.steps)
	if t.val != nil {
		msg += fmt.Sprintf(": validation loss %.4f", *t.val)
	}
	c := t.r.cfg.Control
	if err := c.AddEvent(ctx, t.job.ID, consensus.NewEvent(consensus.EventDone, t.epoch, t.steps, msg)); err != nil {
		t.r.log.Warn("record the job's end", "job", t.job.ID, "err", err)
	}
	return c.SetJobStatus(ctx, t.job.ID, consensus.JobDone, msg)
}

// reportIntegrity records, as one event each, the contributions the step dropped and a step
// skipped for a non-finite gradient norm. The event log is a bounded ring, so a replica that
// misbehaves every step cannot grow the control plane's state.
func (t *training) reportIntegrity(ctx context.Context, res parallel.StepResult) {
	for _, r := range res.Rejected {
		t.r.cfg.Metrics.ObserveRejected(t.job.ID, r.Member)
	}
	if res.Skipped {
		t.r.cfg.Metrics.ObserveSkipped(t.job.ID)
	}
	if res.Audited > 0 {
		t.r.cfg.Metrics.ObserveAudits(t.job.ID, res.Audited)
	}
	var evs []consensus.Event
	if len(res.Rejected) > 0 {
		var parts []string
		for _, r := range res.Rejected {
			parts = append(parts, r.Member+": "+r.Reason)
		}
		msg := fmt.Sprintf("%s dropped %d contribution(s) at step %d: %s", t.r.cfg.Self, len(res.Rejected), res.Step, strings.Join(parts, "; "))
		evs = append(evs, consensus.NewEvent(consensus.EventContributionRejected, t.epoch, res.Step, msg))
	}
	if res.Skipped {
		msg := fmt.Sprintf("%s skipped step %d: its gradient norm is not finite", t.r.cfg.Self, res.Step)
		evs = append(evs, consensus.NewEvent(consensus.EventStepSkipped, t.epoch, res.Step, msg))
	}
	t.shipEvidence(res.Offenders)
	for _, m := range res.Offenders {
		t.r.cfg.Metrics.ObserveOffender(t.job.ID, m)
		why := fmt.Sprintf("%s dropped its contributions in %d consecutive syncs up to step %d", t.r.cfg.Self, parallel.OffenderAfter, res.Step)
		if i := slices.IndexFunc(res.Rejected, func(r parallel.Rejection) bool { return r.Member == m && r.Proven }); i >= 0 {
			why = fmt.Sprintf("%s recomputed its contribution at step %d: %s", t.r.cfg.Self, res.Step, res.Rejected[i].Reason)
		}
		evs = append(evs, consensus.NewEvent(consensus.EventOffender, t.epoch, res.Step, jobspec.OffenderMessage(m, why)))
	}
	for _, ev := range evs {
		t.r.log.Warn("training integrity", "job", t.job.ID, "kind", ev.Kind, "msg", ev.Message)
		if err := t.r.cfg.Control.AddEvent(ctx, t.job.ID, ev); err != nil {
			t.r.log.Warn("record a training-integrity event", "kind", ev.Kind, "err", err)
		}
	}
}
