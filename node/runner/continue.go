package runner

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// An epoch that continues the previous one in place (scheduler.JobPlan.Continues: the plan
// without the replicas that lost a node) does not stop this node's worker: the worker keeps
// its state and steps on, the nodes the epoch dropped are retired from its outer steps'
// quorum (parallel.Worker.Retire), and the training reports progress, evaluations and
// checkpoints under the new epoch, by the roles the new plan gives this node.

// outerGrace is the grace window of the outer steps of the node's jobs
// (parallel.JobConfig.Grace): once a majority of a group's replicas is in, a replica later
// than this is left out of the step. It bounds the stall a replica that died costs its
// survivors before the control plane retires it.
const outerGrace = 2 * time.Second

// follower is what a running worker needs of the in-place epochs that follow its own:
// guarded, since the runner's Reconcile hands them over while the worker trains.
type follower struct {
	start   uint64 // the epoch the worker was built for: its frames carry it throughout
	ctx     context.Context
	mu      sync.Mutex
	w       *parallel.Worker // nil until built
	retired []string         // the nodes in-place epochs dropped
	back    []string         // the nodes in-place epochs brought back (rejoin.go)
	subs    []substitution   // the spares in-place epochs put in dropped nodes' places (rebuild.go)
	epoch   uint64           // the latest epoch the worker follows
	jp      scheduler.JobPlan
}

// setWorker records the built worker and retires on it what epochs dropped meanwhile,
// then readmits what they brought back.
func (f *follower) setWorker(w *parallel.Worker) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w = w
	w.Retire(f.retired...)
	w.Readmit(f.ctx, f.back...)
	substitute(f.ctx, w, f.subs)
}

// follow adopts an in-place epoch: the nodes of the followed plan that jp lacks are
// retired, and those jp adds back (a rejoin) are readmitted.
func (f *follower) follow(epoch uint64, jp scheduler.JobPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var gone, back []string
	for _, id := range f.jp.Nodes() {
		if !jp.Has(id) {
			gone = append(gone, id)
		}
	}
	for _, id := range jp.Nodes() {
		if !f.jp.Has(id) {
			back = append(back, id)
		}
	}
	subs, back := splitSubstitutes(f.jp, jp, back)
	f.retired = append(f.retired, gone...)
	f.back, f.subs = append(f.back, back...), append(f.subs, subs...)
	if f.w != nil {
		f.w.Retire(gone...)
		f.w.Readmit(f.ctx, back...)
		substitute(f.ctx, f.w, subs)
	}
	f.epoch, f.jp = epoch, jp
}

// epochAtStart is the epoch the worker was built for.
func (f *follower) epochAtStart() uint64 { return f.start }

// current is the latest epoch followed and its plan.
func (f *follower) current() (uint64, scheduler.JobPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch, f.jp
}

// continueInPlace hands an in-place epoch that names this node to its running worker and
// reports whether it did; false leaves the epoch to the ordinary stop and start.
func (r *Runner) continueInPlace(run *jobRun, epoch uint64, jp scheduler.JobPlan) bool {
	if !jp.Continues || !jp.Has(r.cfg.Self) {
		return false
	}
	select {
	case <-run.done:
		if run.finished.Load() {
			// It trained to the end: nothing is left to continue, nothing to refuse.
			run.epoch = epoch
			return true
		}
		return false // the worker failed: it has no state to continue with
	default:
	}
	r.log.Info("continue in place", "epoch", epoch, "from_epoch", run.epoch, "nodes", len(jp.Nodes()), "rejoin", jp.Rejoin)
	if dp := r.cfg.Network.DataPlane(); dp != nil && len(jp.Rejoin) > 0 {
		// A node that rejoins after a restart listens elsewhere now.
		if err := r.addressPeers(dp, jp); err != nil {
			r.log.Warn("address the nodes of an in-place epoch", "epoch", epoch, "err", err)
		}
	}
	run.follow(epoch, jp)
	run.epoch = epoch
	return true
}

// refuseContinue answers an in-place epoch this node has no running worker for (its worker
// ended, or it was not training): it cannot continue what it does not hold, so it reports
// a failed worker of that epoch and the leader replans from a checkpoint. The run it
// returns, already done, keeps the report from being repeated.
//
// The report waits for the leader to confirm that the epoch is still the job's current
// one. A node that restarts reads the jobs from its own FSM while raft catches it up: it
// restores a snapshot and applies the log in batches, so it may see an in-place epoch
// that named it before it died long after the leader has moved on (dropped it, brought it
// back). Refusing that epoch is no failure of the job's, only noise in its events.
func (r *Runner) refuseContinue(j consensus.Job, epoch uint64) *jobRun {
	run := &jobRun{epoch: epoch, cancel: func() {}, done: make(chan struct{})}
	close(run.done)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		cur, err := r.cfg.Control.PlanEpoch(ctx, j.ID)
		switch {
		case err != nil:
			r.log.Warn("confirm an in-place epoch before refusing it; refusing it unconfirmed", "job", j.ID, "epoch", epoch, "err", err)
		case cur != epoch:
			r.log.Info("an in-place epoch this node holds no worker for is superseded already", "job", j.ID, "epoch", epoch, "current", cur)
			return
		}
		msg := fmt.Sprintf("%s has no worker to continue epoch %d in place with", r.cfg.Self, epoch)
		if err := r.cfg.Control.AddEvent(ctx, j.ID, consensus.NewEvent(consensus.EventWorkerFailed, epoch, 0, msg)); err != nil {
			r.log.Warn("record a refused in-place epoch", "job", j.ID, "err", err)
		}
	}()
	return run
}

// roles are what a plan asks of this node's worker beyond its stage: whether it reports
// the job's progress (the last stage of the plan's first replica) and evaluates (a stage
// of the first replica).
func roles(jp scheduler.JobPlan, self string) (report, evaluate bool) {
	if len(jp.Replicas) == 0 {
		return false, false
	}
	first := jp.Replicas[0]
	evaluate = slices.ContainsFunc(first, func(s scheduler.Stage) bool { return s.Node == self })
	return first[len(first)-1].Node == self, evaluate
}
