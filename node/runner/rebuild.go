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

// substitution is a node an in-place epoch puts in the place of a dropped one: a spare
// rebuilding a lost stage.
type substitution struct{ old, new string }

// splitSubstitutes separates, from the nodes next brings back (back), the spares that take
// a dropped node's place: a replica of next at the slot of a replica prev ran without,
// whose stage names another node than the dropped replica's did.
func splitSubstitutes(prev, next scheduler.JobPlan, back []string) ([]substitution, []string) {
	var subs []substitution
	for i, stages := range next.Replicas {
		if i >= len(next.Slots) {
			break
		}
		for _, d := range prev.Dropped {
			if d.Slot != next.Slots[i] || len(d.Stages) != len(stages) {
				continue
			}
			for k, st := range stages {
				if st.Node != d.Stages[k].Node {
					subs = append(subs, substitution{old: d.Stages[k].Node, new: st.Node})
				}
			}
		}
	}
	rest := slices.DeleteFunc(slices.Clone(back), func(id string) bool {
		return slices.ContainsFunc(subs, func(s substitution) bool { return s.new == id })
	})
	return subs, rest
}

// substitute hands subs to the running worker w.
func substitute(ctx context.Context, w *parallel.Worker, subs []substitution) {
	for _, s := range subs {
		w.Substitute(ctx, s.old, s.new)
	}
}
