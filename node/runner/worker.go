package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// dataLabel names the job's corpus for the engine's configuration: data.source, else the
// data.train file, else "local:" and the data.local name.
func dataLabel(d jobspec.Data) string {
	switch {
	case d.Source != "":
		return d.Source
	case d.Train != "":
		return d.Train
	case d.Local != "":
		return "local:" + d.Local
	}
	return ""
}

// jobConfig is the engine's configuration of a job under a plan.
func jobConfig(j consensus.Job, epoch uint64, jp scheduler.JobPlan) parallel.JobConfig {
	s := j.Spec
	tc := parallel.DefaultTrainConfig()
	tc.Model, tc.Data = scheduler.ModelConfig(s), dataLabel(s.Data)
	tc.Batch, tc.MicroBatches, tc.Steps = s.Train.Batch, jp.MicroBatches, s.Train.Steps
	tc.LR, tc.Warmup, tc.Seed, tc.EvalEvery = s.Train.LR, s.Train.Warmup, s.Train.Seed, s.Train.EvalEvery
	tc.LoRA = s.Train.LoRA // adapters on model.init's base (initFile), else the seed's (docs/lora.md)
	sc := parallel.DefaultSyncConfig()
	sc.Mode, sc.InnerSteps = s.Parallel.Sync, s.Parallel.InnerSteps
	sc.Codec = s.Parallel.Codec
	sc.OuterLR, sc.OuterMomentum = s.Outer()
	sc.Fragments, sc.Overlap, sc.Aggregate = s.Parallel.Fragments, s.Parallel.OverlapSteps, s.Parallel.Aggregate
	sc.Zero, sc.Score = s.Memory.Zero, s.ResolvedScore() // off for data.local
	sc.Audit = scheduler.AuditRate(s, jp)                // auto: where the plan is auditable
	return parallel.JobConfig{Train: tc, Schedule: s.Parallel.Schedule, Sync: sc, Job: frameJob(j.ID), Epoch: uint32(epoch)}
}

// runWorker trains this node's stage of a plan epoch to the end of the job, reporting
// progress. A worker stopped for a new epoch records the step it reached, so the steps the
// next epoch redoes are known; a failure is reported to the leader, who decides what it
// means (a dead peer or a broken stream gets a new epoch from the last checkpoint;
// repeated failures end the job).
func (r *Runner) runWorker(ctx context.Context, j consensus.Job, run *jobRun, jp scheduler.JobPlan) {
	var reached int
	err := r.train(ctx, j, run, jp, &reached)
	if err == nil {
		run.finished.Store(true)
	}
	if err == nil || r.ctx.Err() != nil {
		return
	}
	epoch, _ := run.current() // the latest epoch it followed in place
	log := r.log.With("job", j.ID, "epoch", epoch)
	bg, cancel := context.WithTimeout(r.ctx, 10*time.Second)
	defer cancel()
	ev := consensus.NewEvent(consensus.EventWorkerStopped, epoch, reached, fmt.Sprintf("%s stopped after step %d", r.cfg.Self, reached))
	if ctx.Err() == nil {
		log.Warn("worker failed", "err", err)
		ev = consensus.NewEvent(consensus.EventWorkerFailed, epoch, reached, fmt.Sprintf("%s after step %d: %v", r.cfg.Self, reached, err))
	}
	if err := r.cfg.Control.AddEvent(bg, j.ID, ev); err != nil {
		log.Warn("record the worker's end", "kind", ev.Kind, "err", err)
	}
}

// train runs the worker; reached is set to the steps it completed (or resumed from).
func (r *Runner) train(ctx context.Context, j consensus.Job, run *jobRun, jp scheduler.JobPlan, reached *int) error {
	epoch := run.epochAtStart()
	data, err := r.dataset(ctx, j, jp)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	dp := r.cfg.Network.DataPlane()
	if dp == nil {
		return errNoDataPlane
	}
	if err := r.addressPeers(dp, jp); err != nil && !jp.Continues {
		return err
	} else if err != nil {
		// A node that rejoins right after its restart may not have heard every peer's
		// announcement yet.
		if err := r.awaitPeerAddrs(ctx, dp, jp); err != nil {
			return err
		}
	}
	cfg := jobConfig(j, epoch, jp)
	if j.Spec.Model.InitBlob != "" && cfg.Train.LoRA != nil {
		// LoRA's frozen base is model.init's weights, which every stage build (and every
		// resume) reads from a file: the blob, verified, written once under the data dir.
		path, err := r.initFile(ctx, j.Spec.Model.InitBlob)
		if err != nil {
			return err
		}
		cfg.Train.Init = path
	}
	cfg.Grace = outerGrace
	// A stage the plan gives a memory budget keeps its training state's chunks in a file
	// here (created unlinked: nothing is left behind).
	cfg.Train.OffloadDir = filepath.Join(r.cfg.DataDir, "offload")
	// A rejoining node builds the worker the running ones were built with (rejoin.go).
	w, err := parallel.NewWorker(cfg, EnginePlan(jp.BuiltPlan()), r.cfg.Self, dp, data)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer w.Close()
	defer func() { *reached = w.StepsDone() }()
	if cfg.Sync.Audit > 0 && !w.Audits() {
		r.log.Warn("parallel.audit asked for, but this plan's gathers cannot be audited: every replica must be one whole-model stage on the CPU (no pipeline stages, offload, device backend or LoRA)", "job", j.ID, "epoch", epoch)
	}
	joins := jp.Continues
	if joins {
		run.retireDropped(jp)
	}
	run.setWorker(w)
	switch {
	case joins:
		current, _ := run.current()
		if err := r.join(ctx, j, current, w, jp); err != nil {
			return err
		}
	case jp.ResumeStep > 0:
		if err := r.restoreWorker(ctx, j, w, jp.ResumeStep); err != nil {
			return err
		}
	case j.Spec.Model.InitBlob != "" && cfg.Train.LoRA == nil:
		if err := r.startFromInit(ctx, w, j.Spec.Model.InitBlob, cfg.Train.Model); err != nil {
			return err
		}
	}
	t := newTraining(r, j, epoch, jp, cfg, w)
	if name := j.Spec.Data.Local; name != "" {
		t.local = &localData{name: name, trainTokens: data.Train.Len(), valTokens: data.Val.Len()}
		r.log.Info("training on a local dataset", "job", j.ID, "data", name, "train_tokens", t.local.trainTokens, "val_tokens", t.local.valTokens)
	}
	t.follower = &run.follower
	t.joining = joins
	defer t.writes.Wait()
	if jp.ResumeStep == 0 && !joins {
		if err := t.evaluate(ctx, w.StepsDone(), 0); err != nil {
			return err
		}
	}
	w.SetUpdateGate(t.gate)
	hooks := parallel.Hooks{Checkpoint: t.checkpoint, Evaluate: t.evaluate, Progress: t.progress}
	if err := parallel.TrainLoop(ctx, t, cfg.Train, 0, hooks); err != nil {
		return err
	}
	return t.finish(ctx)
}

// addressPeers tells the data plane where every node of the plan listens, from their
// announced profiles.
func (r *Runner) addressPeers(dp DataPlane, jp scheduler.JobPlan) error {
	for _, id := range jp.Nodes() {
		if id == r.cfg.Self {
			continue
		}
		a, ok := r.cfg.Network.DataAddr(id)
		if !ok {
			return fmt.Errorf("node %s of the plan announces no data-plane address", id)
		}
		dp.SetPeerAddr(id, a)
	}
	return nil
}
