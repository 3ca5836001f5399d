package scheduler

import (
	"slices"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// A replica of several pipeline stages that lost a stage's node is dropped in place like
// a one-stage replica (continueWithout), and rebuilt in place once every node of it is a
// live candidate again (the restarted node, and its stages' surviving nodes, which never
// left): every stage of it rejoins, copying its layers from a live replica's stage that
// holds them, all at one step (parallel.Worker.RebuildFrom; docs/engine.md, "A lost
// pipeline stage"). A stage whose layers no live replica's single stage holds cannot be
// copied: the replica stays dropped, and checkpoints remain for when no replica is whole.

// canRejoin reports whether dropped replica d is brought back into next in place: every
// node of it ready (a live candidate whose rejoin has not failed) and in no replica of
// next, and, for a replica of several stages, each stage's layers held by one stage of a
// replica of next that is not itself rejoining (rejoining: the nodes that rejoin in next
// so far and in the current plan).
func canRejoin(d DroppedReplica, ready map[string]bool, next JobPlan, rejoining []string) bool {
	for _, st := range d.Stages {
		if !ready[st.Node] || next.Has(st.Node) {
			return false
		}
	}
	if len(d.Stages) == 1 {
		return true // a one-stage rejoiner finds its source itself (node/runner)
	}
	for _, st := range d.Stages {
		if len(stageSources(next, st, rejoining)) == 0 {
			return false
		}
	}
	return true
}

// stageSources are the nodes of jp's replicas, not rejoining, whose stage holds want's
// layers.
func stageSources(jp JobPlan, want Stage, rejoining []string) []string {
	var out []string
	for _, stages := range jp.Replicas {
		for _, st := range stages {
			if st.First <= want.First && st.Last >= want.Last && !slices.Contains(rejoining, st.Node) {
				out = append(out, st.Node)
			}
		}
	}
	return out
}

// stageNodes lists the nodes of stages.
func stageNodes(stages []Stage) []string {
	out := make([]string, len(stages))
	for i, st := range stages {
		out[i] = st.Node
	}
	return out
}

// anyFailed reports whether a node of stages is in failed.
func anyFailed(stages []Stage, failed map[string]bool) bool {
	return slices.ContainsFunc(stages, func(st Stage) bool { return failed[st.Node] })
}

// failedOutsideLost counts the worker failures of the current epoch reported by nodes
// outside the replicas that hold a dead node: a live stage of a replica that lost another
// stage may fail (its pipeline neighbour is gone) before the control plane drops that
// replica, and that failure is the loss's, not a reason to restart the others from a
// checkpoint.
func failedOutsideLost(j Job, live liveness) int {
	lost := map[string]bool{}
	for _, stages := range j.Plan.Replicas {
		if slices.ContainsFunc(stages, func(st Stage) bool { return live.dead(st.Node) }) {
			for _, st := range stages {
				lost[st.Node] = true
			}
		}
	}
	n := 0
	for _, ev := range j.Events {
		if ev.Kind == jobspec.EventWorkerFailed && ev.Epoch == j.Epoch && !lost[ev.By] {
			n++
		}
	}
	return n
}

// withSpares gives each stage of dropped replica d whose node is not ready (it has not
// come back) to a spare: a ready candidate in no replica of next and no dropped replica
// of the job, with at least the memory the lost node had when the job was planned (its
// plan's inputs). A dead machine may never come back; the spare rebuilds the stage in its
// place (parallel.Worker.Substitute). Only replicas of several stages take spares: a
// one-stage replica waits for its node (node/runner's one-stage rejoin).
func withSpares(d DroppedReplica, j Job, next JobPlan, cands []candidate, ready map[string]bool) DroppedReplica {
	if len(d.Stages) < 2 {
		return d
	}
	out := d
	out.Stages = slices.Clone(d.Stages)
	taken := func(id string) bool {
		if next.Has(id) || slices.ContainsFunc(out.Stages, func(st Stage) bool { return st.Node == id }) {
			return true
		}
		return slices.ContainsFunc(j.Plan.Dropped, func(o DroppedReplica) bool {
			return slices.ContainsFunc(o.Stages, func(st Stage) bool { return st.Node == id })
		})
	}
	for i, st := range out.Stages {
		if ready[st.Node] {
			continue
		}
		need, known := lentMemory(j.Plan.Inputs, st.Node)
		for _, c := range cands {
			if ready[c.id] && !taken(c.id) && known && c.profile.MemoryBytes >= need {
				out.Stages[i].Node = c.id
				break
			}
		}
	}
	return out
}

// lentMemory is the memory node lent to training when the plan was made, as its inputs
// recorded it.
func lentMemory(in PlanInputs, node string) (int64, bool) {
	for _, n := range in.Snapshot.Nodes {
		if n.ID == node && n.GPU == nil {
			return n.MemoryBytes, true
		}
	}
	return 0, false
}
