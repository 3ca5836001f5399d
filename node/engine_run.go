package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// progressEvery bounds how often a worker commits progress between evaluations.
const progressEvery = 2 * time.Second

// jobConfig is the engine's configuration of a job under a plan.
func jobConfig(j consensus.Job, epoch uint64, jp JobPlan) parallel.JobConfig {
	s := j.Spec
	tc := parallel.DefaultTrainConfig()
	tc.Model, tc.Data = modelConfig(s), s.Data.Source
	tc.Batch, tc.MicroBatches, tc.Steps = s.Train.Batch, jp.MicroBatches, s.Train.Steps
	tc.LR, tc.Warmup, tc.Seed, tc.EvalEvery = s.Train.LR, s.Train.Warmup, s.Train.Seed, s.Train.EvalEvery
	sc := parallel.DefaultSyncConfig()
	sc.Mode, sc.InnerSteps = parallel.SyncMode(s.Parallel.Sync), s.Parallel.InnerSteps
	sc.OuterLR, sc.OuterMomentum, sc.Codec = s.Parallel.OuterLR, s.Parallel.OuterMomentum, parallel.CodecName(s.Parallel.Codec)
	return parallel.JobConfig{Train: tc, Schedule: parallel.Schedule(s.Parallel.Schedule), Sync: sc, Job: frameJob(j.ID), Epoch: uint32(epoch)}
}

// dataset returns the job's corpus: the blob its submitting node published (fetched from
// a holder and verified if this node lacks it), or, for a job submitted without one
// (straight through the consensus API), the corpus read locally.
func (e *engine) dataset(ctx context.Context, j consensus.Job) (*model.Dataset, error) {
	if blob := j.Spec.Data.Blob; blob != "" {
		return e.n.LoadDataset(ctx, blob, nil)
	}
	key := j.Spec.Data.Source + "|" + j.Spec.Data.Train + "|" + j.Spec.Data.Val
	e.mu.Lock()
	ds := e.datasets[key]
	e.mu.Unlock()
	if ds != nil {
		return ds, nil
	}
	src := j.Spec.Data.Source
	if src == "" {
		src = j.Spec.Data.Train
	}
	ds, err := model.LoadDataset(src, j.Spec.Model.Vocab)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.datasets[key] = ds
	e.mu.Unlock()
	return ds, nil
}

// runWorker trains this node's stage of a plan epoch to the end of the job, reporting
// progress. A worker stopped for a new epoch records the step it reached, so the steps the
// next epoch redoes are known; a failure is reported to the leader.
func (e *engine) runWorker(ctx context.Context, j consensus.Job, epoch uint64, jp JobPlan) {
	log := e.n.log.With("job", j.ID, "epoch", epoch)
	var reached int
	err := e.train(ctx, j, epoch, jp, &reached)
	if err == nil || e.ctx.Err() != nil {
		return
	}
	c := e.n.Consensus()
	if c == nil {
		return
	}
	bg, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if ctx.Err() != nil {
		_ = c.AddEvent(bg, j.ID, consensus.Event{Kind: eventWorkerStopped, Epoch: epoch, Step: reached,
			Message: fmt.Sprintf("%s stopped after step %d", e.n.ID(), reached)})
		return
	}
	// The leader decides what a failure means: a dead peer or a broken stream gets a new
	// epoch from the last checkpoint; repeated failures end the job.
	log.Warn("worker failed", "err", err)
	_ = c.AddEvent(bg, j.ID, consensus.Event{Kind: eventWorkerFailed, Epoch: epoch, Step: reached,
		Message: fmt.Sprintf("%s after step %d: %v", e.n.ID(), reached, err)})
}

// progress collects what the reporting worker commits.
type progress struct {
	e       *engine
	job     string
	epoch   uint64
	report  bool // this worker commits progress (the last stage of replica 0)
	pending []consensus.ProgressSample
	last    time.Time
	steps   int // steps since the last sample
	elapsed time.Duration
	tokens  int   // tokens per step, all replicas
	traffic int64 // the latest traffic total, carried into samples between evaluations
}

func (p *progress) add(ctx context.Context, step int, loss float64, val *float64, traffic int64, force bool) error {
	if !p.report {
		return nil
	}
	if traffic >= 0 {
		p.traffic = traffic
	}
	s := consensus.ProgressSample{Time: time.Now().UTC(), Epoch: p.epoch, Step: step, Loss: loss, ValLoss: val, BytesSent: uint64(p.traffic)}
	if p.steps > 0 {
		s.StepSeconds = p.elapsed.Seconds() / float64(p.steps)
		s.TokensPerSec = float64(p.tokens*p.steps) / p.elapsed.Seconds()
	}
	if !force && time.Since(p.last) < progressEvery {
		return nil
	}
	p.pending = append(p.pending, s)
	p.steps, p.elapsed, p.last = 0, 0, time.Now()
	c := p.e.n.Consensus()
	if c == nil {
		return errNoConsensus
	}
	if err := c.ReportProgress(ctx, p.job, p.pending); err != nil {
		return fmt.Errorf("report progress: %w", err)
	}
	p.pending = p.pending[:0]
	return nil
}

// train runs the worker; reached is set to the steps it completed (or resumed from).
func (e *engine) train(ctx context.Context, j consensus.Job, epoch uint64, jp JobPlan, reached *int) error {
	data, err := e.dataset(ctx, j)
	if err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	dp := e.n.DataPlane()
	if dp == nil {
		return errNoDataPlane
	}
	if err := e.addressPeers(jp); err != nil {
		return err
	}
	cfg := jobConfig(j, epoch, jp)
	w, err := parallel.NewWorker(cfg, jp.Engine(), e.n.ID().String(), dp, data)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer func() { *reached = w.StepsDone() }()
	global := 0
	for _, b := range jp.Engine().Batches {
		global += b
	}
	if global == 0 {
		global = cfg.Train.Batch * len(jp.Replicas)
	}
	if jp.ResumeStep > 0 {
		if err := e.restoreWorker(ctx, j, w, jp.ResumeStep); err != nil {
			return err
		}
	}
	p := &progress{e: e, job: j.ID, epoch: epoch, report: w.Replica() == 0 && w.IsLast(), tokens: global * cfg.Train.Model.Context}
	var writes sync.WaitGroup
	defer writes.Wait()
	evaluate := func() (*float64, int64, error) {
		var val *float64
		if w.Replica() == 0 {
			v, ok, err := w.Evaluate(ctx)
			if err != nil {
				return nil, 0, err
			}
			if ok {
				val = &v
			}
		}
		traffic, err := w.GatherTraffic(ctx)
		return val, traffic, err
	}
	var val *float64
	var traffic int64
	if jp.ResumeStep == 0 {
		if val, traffic, err = evaluate(); err != nil {
			return err
		}
		if err := p.add(ctx, w.StepsDone(), 0, val, traffic, true); err != nil {
			return err
		}
	}
	T := cfg.Train
	// A checkpoint is written beside the next step's forward and backward passes; that
	// step applies its update only once the write, its replica on another node and its
	// manifest are done (the gate), so the job never runs more than checkpoint.every steps
	// past a checkpoint that survives any one node.
	var stored chan struct{}
	w.SetUpdateGate(func(ctx context.Context, _ int) error {
		if stored == nil {
			return nil
		}
		select {
		case <-stored:
			stored = nil
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	lastCkpt := w.StepsDone()
	for w.StepsDone() < T.Steps {
		start := time.Now()
		res, err := w.Step(ctx)
		if err != nil {
			return err
		}
		p.steps++
		p.elapsed += time.Since(start)
		step := w.StepsDone()
		// Checkpoints land on the first step at or after each multiple of every where the
		// replicas agree: every such step in sync mode, the next outer step in DiLoCo.
		if every := j.Spec.Checkpoint.Every; every > 0 && step/every > lastCkpt/every && w.Consistent() && step < T.Steps {
			lastCkpt = step
			snap := w.Snapshot() // a copy: the write runs beside training
			done := make(chan struct{})
			stored = done
			writes.Add(1)
			go func() {
				defer writes.Done()
				defer close(done)
				if err := e.writeCheckpoint(ctx, j.ID, epoch, jp, j.Spec.Checkpoint.Keep, snap); err != nil && ctx.Err() == nil {
					e.n.log.Warn("checkpoint", "job", j.ID, "step", snap.Step, "err", err)
				}
			}()
		}
		if (T.EvalEvery > 0 && step%T.EvalEvery == 0) || step == T.Steps {
			if val, traffic, err = evaluate(); err != nil {
				return err
			}
			if err := p.add(ctx, step, res.Loss, val, traffic, true); err != nil {
				return err
			}
			continue
		}
		if err := p.add(ctx, step, res.Loss, nil, -1, false); err != nil {
			return err
		}
	}
	if !p.report {
		return nil
	}
	c := e.n.Consensus()
	msg := fmt.Sprintf("finished %d steps: validation loss %.4f", T.Steps, *val)
	_ = c.AddEvent(ctx, j.ID, consensus.Event{Kind: "done", Epoch: epoch, Step: T.Steps, Message: msg})
	return c.SetJobStatus(ctx, j.ID, consensus.JobDone, msg)
}

// addressPeers tells the data plane where every node of the plan listens, from their
// announced profiles.
func (e *engine) addressPeers(jp JobPlan) error {
	addrs := map[string]string{}
	for _, pi := range e.n.mesh.Peers() {
		if pi.Profile != nil && pi.Profile.DataAddr != "" {
			addrs[pi.ID.String()] = pi.Profile.DataAddr
		}
	}
	self := e.n.ID().String()
	dp := e.n.DataPlane()
	for _, id := range jp.Nodes() {
		if id == self {
			continue
		}
		a, ok := addrs[id]
		if !ok {
			return fmt.Errorf("node %s of the plan announces no data-plane address", id)
		}
		dp.SetPeerAddr(id, a)
	}
	return nil
}
