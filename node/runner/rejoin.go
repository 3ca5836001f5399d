package runner

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// A node that an in-place epoch brings back into a running DiLoCo or streaming job
// (scheduler.JobPlan.Rejoin: a restarted node, its replica dropped when it died) does not
// restore a checkpoint and does not stop the others: it builds the worker the running
// ones were built with (JobPlan.BuiltPlan, frames of epoch JobPlan.Built), copies the
// current state from a live replica at that replica's next outer-step boundary
// (parallel.Worker.JoinFrom), records EventStateCopied, and trains on; the survivors'
// runners readmit it (follower.follow) and serve the copy. Once the outer steps' quorum
// admits it, it records EventRejoined.

// joinSources are the live nodes a node rejoining jp copies its stage from: the stages of
// the other replicas of jp that are not rejoining themselves, covering the same layers,
// the first replica first. false when self cannot join jp in place: jp records no built
// plan, self's replica has several stages, or no source covers its layers.
func joinSources(jp scheduler.JobPlan, self string) ([]string, bool) {
	if !jp.Continues || jp.Built == 0 || len(jp.Slots) != len(jp.Replicas) {
		return nil, false
	}
	var mine *scheduler.Stage
	for _, stages := range jp.Replicas {
		for i := range stages {
			if stages[i].Node == self && len(stages) == 1 {
				mine = &stages[i]
			}
		}
	}
	if mine == nil {
		return nil, false
	}
	var out []string
	for _, stages := range jp.Replicas {
		for _, st := range stages {
			if st.Node != self && !slices.Contains(jp.Rejoin, st.Node) && st.First == mine.First && st.Last == mine.Last {
				out = append(out, st.Node)
			}
		}
	}
	return out, len(out) > 0
}

// retireDropped retires, on a rejoining node's worker, the nodes of the built plan that
// jp runs without.
func (f *follower) retireDropped(jp scheduler.JobPlan) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range jp.BuiltPlan().Nodes() {
		if !jp.Has(id) {
			f.retired = append(f.retired, id)
		}
	}
}

// join copies the worker's state from a live replica and records where it came from.
func (r *Runner) join(ctx context.Context, j consensus.Job, epoch uint64, w *parallel.Worker, jp scheduler.JobPlan) error {
	st, err := r.copyState(ctx, w, jp)
	if err != nil {
		return fmt.Errorf("rejoin: %w", err)
	}
	msg := fmt.Sprintf("%s copied step %d from live replica %s: %d bytes in %.2f s", r.cfg.Self, st.Step, st.Peer, st.Bytes, st.Took.Seconds())
	r.log.Info("rejoined in place", "job", j.ID, "source", st.Peer, "step", st.Step, "bytes", st.Bytes, "took", st.Took)
	r.recordEvent(j.ID, consensus.NewEvent(consensus.EventStateCopied, epoch, st.Step, msg))
	return nil
}

// recordEvent adds ev in the background, without holding the training up.
func (r *Runner) recordEvent(job string, ev consensus.Event) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
		defer cancel()
		if err := r.cfg.Control.AddEvent(ctx, job, ev); err != nil {
			r.log.Warn("record an event", "job", job, "kind", ev.Kind, "err", err)
		}
	}()
}

// reportAdmission records EventRejoined once a rejoining worker is admitted.
func (t *training) reportAdmission() {
	if !t.joining || t.w.Joining() {
		return
	}
	t.joining = false
	t.followEpoch()
	msg := fmt.Sprintf("%s was admitted into the outer steps' quorum after step %d", t.r.cfg.Self, t.w.StepsDone())
	t.r.recordEvent(t.job.ID, consensus.NewEvent(consensus.EventRejoined, t.epoch, t.w.StepsDone(), msg))
}

// peerAddrWait bounds how long a rejoining node waits to hear where the plan's nodes
// listen.
const peerAddrWait = 30 * time.Second

// awaitPeerAddrs retries addressPeers until every node of jp announced its data-plane
// address, up to peerAddrWait.
func (r *Runner) awaitPeerAddrs(ctx context.Context, dp DataPlane, jp scheduler.JobPlan) error {
	ctx, cancel := context.WithTimeout(ctx, peerAddrWait)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := r.addressPeers(dp, jp)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (waited %s)", err, peerAddrWait)
		case <-tick.C:
		}
	}
}
