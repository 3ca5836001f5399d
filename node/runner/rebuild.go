package runner

import (
	"context"
	"slices"

	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// A replica of several pipeline stages that an in-place epoch brings back (every node of
// it in scheduler.JobPlan.Rejoin: the restarted node that held a lost stage, and the
// nodes of its other stages, whose workers stopped when the replica was dropped) is
// rebuilt whole: each of its nodes builds the running workers' plan, as a one-stage
// rejoiner does, and copies its layers from a live replica's stage that holds them, all
// of the replica's stages at one step (parallel.Worker.RebuildFrom).

// rebuildSource is the live node that self, a stage of a replica of several stages that
// jp rebuilds, copies its layers from: a stage of another replica of jp that holds them
// and is not rejoining, the first replica first. false when there is none, or self is not
// such a stage.
func rebuildSource(jp scheduler.JobPlan, self string) (string, bool) {
	if !jp.Continues || jp.Built == 0 || len(jp.Slots) != len(jp.Replicas) || !slices.Contains(jp.Rejoin, self) {
		return "", false
	}
	var mine *scheduler.Stage
	for _, stages := range jp.Replicas {
		for i := range stages {
			if stages[i].Node == self && len(stages) > 1 {
				mine = &stages[i]
			}
		}
	}
	if mine == nil {
		return "", false
	}
	for _, stages := range jp.Replicas {
		for _, st := range stages {
			if st.Node != self && !slices.Contains(jp.Rejoin, st.Node) && st.First <= mine.First && st.Last >= mine.Last {
				return st.Node, true
			}
		}
	}
	return "", false
}

// canJoin reports whether self can join jp in place: as a one-stage rejoiner
// (joinSources) or as a stage of a rebuilt replica.
func canJoin(jp scheduler.JobPlan, self string) bool {
	if _, ok := joinSources(jp, self); ok {
		return true
	}
	_, ok := rebuildSource(jp, self)
	return ok
}

// copyState copies the worker's state from a live replica: a stage of a rebuilt replica
// from its source's stage, a one-stage rejoiner from the first of its sources that
// answers.
func (r *Runner) copyState(ctx context.Context, w *parallel.Worker, jp scheduler.JobPlan) (parallel.CopyStats, error) {
	if src, ok := rebuildSource(jp, r.cfg.Self); ok {
		return w.RebuildFrom(ctx, src)
	}
	sources, _ := joinSources(jp, r.cfg.Self)
	return w.JoinFrom(ctx, sources)
}
