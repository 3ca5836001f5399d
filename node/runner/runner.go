package runner

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/scheduler"
)

// errNoDataPlane means the node has no data plane to train over.
var errNoDataPlane = errors.New("the node's data plane is not running")

// Runner runs this node's workers of the jobs the control plane holds.
type Runner struct {
	cfg    Config
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	pins   blobPins

	mu       sync.Mutex
	runs     map[string]*jobRun // job id → the worker this node runs for it
	datasets map[string]*model.Dataset
	copied   map[string]bool // "job/hash" of checkpoint files this node holds or is fetching
	pruned   time.Time       // when checkpoint files were last pruned (gc.go)
	// unreferenced is when this runner first saw each held blob referenced by no job
	// (gc.go); only the Reconcile goroutine touches it.
	unreferenced map[string]time.Time
}

// jobRun is one worker of one plan epoch, and of the epochs that continue it in place.
type jobRun struct {
	epoch  uint64 // the latest epoch it runs (only the Reconcile goroutine touches it)
	cancel context.CancelFunc
	done   chan struct{}
	// finished says the worker trained to the end of the job (set before done closes).
	finished atomic.Bool
	follower
}

// New returns a runner with cfg's dependencies; it runs nothing before Reconcile.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{cfg: cfg, log: log, runs: map[string]*jobRun{}, datasets: map[string]*model.Dataset{}, copied: map[string]bool{}}
	r.pins.pinFor = cfg.PinFor
	if r.cfg.Metrics == nil {
		r.cfg.Metrics = noMetrics{}
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Close stops every worker and waits for them and for checkpoint copies in flight.
func (r *Runner) Close() {
	r.cancel()
	r.mu.Lock()
	runs := r.runs
	r.runs = map[string]*jobRun{}
	r.mu.Unlock()
	for _, run := range runs {
		run.cancel()
		<-run.done
	}
	r.wg.Wait()
}

// Reconcile brings this node in line with jobs: it starts the worker each running job's
// current plan gives this node, stops workers of finished jobs and superseded epochs,
// copies the latest complete checkpoint of the jobs it trains, and prunes checkpoint
// files no job needs.
func (r *Runner) Reconcile(jobs []consensus.Job) {
	if r.ctx.Err() != nil {
		return
	}
	for _, j := range jobs {
		r.reconcile(j)
		r.replicate(j)
	}
	r.pruneCheckpointBlobs(jobs)
}

// Training reports whether this node runs a worker of some job.
func (r *Runner) Training() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs) > 0
}

// RunsFrameJob reports whether this node runs a worker of the job whose data-plane frames
// carry id job: the data plane drops frames of other jobs once they have waited a while.
func (r *Runner) RunsFrameJob(job uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.runs {
		if frameJob(id) == job {
			return true
		}
	}
	return false
}

// Pin protects a checkpoint file from pruning for Config.PinFor from now: the blob
// service calls it for a file this node agreed to hold, before its manifest names it.
func (r *Runner) Pin(hash string) { r.pins.pin(hash) }

// reconcile starts the worker a running job's current plan gives this node, and stops
// workers of finished jobs or superseded epochs.
func (r *Runner) reconcile(j consensus.Job) {
	r.mu.Lock()
	run := r.runs[j.ID]
	r.mu.Unlock()
	cur := j.CurrentPlan()
	var jp scheduler.JobPlan
	decoded := cur != nil && json.Unmarshal(cur.Plan, &jp) == nil
	if run != nil && !j.Status.Terminal() && decoded && cur.Epoch != run.epoch && r.continueInPlace(run, cur.Epoch, jp) {
		return
	}
	if run != nil && (j.Status.Terminal() || cur == nil || cur.Epoch != run.epoch) {
		run.cancel()
		<-run.done
		r.mu.Lock()
		delete(r.runs, j.ID)
		r.mu.Unlock()
		r.purgeFrames(j, run.epoch, cur)
		run = nil
	}
	if run != nil || j.Status != consensus.JobRunning || cur == nil {
		return
	}
	if !decoded {
		r.log.Warn("unreadable plan", "job", j.ID, "epoch", cur.Epoch)
		return
	}
	if !jp.Has(r.cfg.Self) {
		return
	}
	start := cur.Epoch
	if jp.Continues {
		if !canJoin(jp, r.cfg.Self) || !slices.Contains(jp.Rejoin, r.cfg.Self) {
			r.mu.Lock()
			r.runs[j.ID] = r.refuseContinue(j, cur.Epoch)
			r.mu.Unlock()
			return
		}
		start = jp.Built // it joins the running workers: their frames carry that epoch
	}
	ctx, cancel := context.WithCancel(r.ctx)
	run = &jobRun{epoch: cur.Epoch, cancel: cancel, done: make(chan struct{})}
	run.follower.start, run.follower.epoch, run.follower.jp, run.follower.ctx = start, cur.Epoch, jp, ctx
	r.mu.Lock()
	r.runs[j.ID] = run
	r.mu.Unlock()
	go func() {
		defer close(run.done)
		r.runWorker(ctx, j, run, jp)
	}()
}

// purgeFrames drops the data-plane frames of a stopped worker's epoch (and of every epoch
// of a finished job) that are still waiting or arrive late.
//
// The frames of an in-place chain's built epoch stay while the chain runs: the node
// dropped from it may be brought back into it (rejoin.go).
func (r *Runner) purgeFrames(j consensus.Job, stopped uint64, cur *consensus.PlanEpoch) {
	through := stopped
	if cur := j.CurrentPlan(); j.Status.Terminal() && cur != nil && cur.Epoch > through {
		through = cur.Epoch
	}
	var jp scheduler.JobPlan
	if !j.Status.Terminal() && cur != nil && json.Unmarshal(cur.Plan, &jp) == nil && jp.Continues && jp.Built > 0 && jp.Built <= through {
		through = jp.Built - 1
	}
	dp := r.cfg.Network.DataPlane()
	if dp == nil {
		return
	}
	if n := dp.Purge(frameJob(j.ID), uint32(through)); n > 0 {
		r.log.Debug("dropped stale frames", "job", j.ID, "through_epoch", through, "frames", n)
	}
}

// frameJob is the 64-bit job id that data-plane frames carry.
func frameJob(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}
