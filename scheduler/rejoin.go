package scheduler

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// DroppedReplica is a replica of the plan the workers were built with that a continuing
// epoch runs without (a node of it died): its index there, its stages and its batch share.
type DroppedReplica struct {
	Slot   int     `json:"slot"`
	Stages []Stage `json:"stages"`
	Batch  int     `json:"batch,omitempty"`
	Shards []int   `json:"shards,omitempty"` // its training shards (JobPlan.DataShards)
}

// built returns p's Built epoch and Slots, taking p's own epoch (epoch) and identity slots
// for a plan that does not continue another.
func (p JobPlan) built(epoch uint64) (uint64, []int) {
	if p.Continues && p.Built != 0 {
		return p.Built, p.Slots
	}
	slots := make([]int, len(p.Replicas))
	for i := range slots {
		slots[i] = i
	}
	return epoch, slots
}

// BuiltPlan is the plan the running workers of a continuing epoch were built with: this
// plan's replicas and the dropped ones, each at its slot. A plan that continues nothing
// (or records no slots) is its own.
func (p JobPlan) BuiltPlan() JobPlan {
	if !p.Continues || p.Built == 0 || len(p.Slots) != len(p.Replicas) {
		return p
	}
	out := p
	n := len(p.Replicas) + len(p.Dropped)
	out.Replicas = make([][]Stage, n)
	if len(p.Batches) > 0 {
		out.Batches = make([]int, n)
	}
	if len(p.DataShards) > 0 {
		out.DataShards = make([][]int, n)
	}
	for i, s := range p.Slots {
		out.Replicas[s] = p.Replicas[i]
		if len(p.Batches) > 0 {
			out.Batches[s] = p.Batches[i]
		}
		if len(p.DataShards) > i {
			out.DataShards[s] = p.DataShards[i]
		}
	}
	for _, d := range p.Dropped {
		out.Replicas[d.Slot] = d.Stages
		if len(p.Batches) > 0 {
			out.Batches[d.Slot] = d.Batch
		}
		if len(p.DataShards) > 0 {
			out.DataShards[d.Slot] = d.Shards
		}
	}
	out.Continues, out.Built, out.Slots, out.Dropped, out.Rejoin = false, 0, nil, nil, nil
	return out
}

// rejoinDropped is the decision to bring dropped replicas of a continuing DiLoCo or
// streaming job back in place once every node of theirs is a live candidate again (a
// restarted node, same identity): the epoch continues with them appended (the reporting
// replica stays the first), and their nodes (Rejoin) copy the current state from a live
// replica instead of the survivors restarting. A node that reported a failed worker since
// the workers were built does not rejoin this job again. A replica of several stages
// rejoins whole, each stage copying from a live replica's stage that holds its layers
// (rebuild.go). nil when none can.
func rejoinDropped(j Job, members []Member) *Decision {
	if j.Plan == nil || !j.Plan.Continues || len(j.Plan.Dropped) == 0 || len(j.Plan.Slots) != len(j.Plan.Replicas) {
		return nil
	}
	ready, failed, cands := map[string]bool{}, failedRejoiners(j), candidates(members)
	for _, c := range cands {
		ready[c.id] = !failed[c.id] // a node whose rejoin failed stays dropped
	}
	next := *j.Plan
	next.Replicas, next.Slots, next.Dropped = slices.Clone(j.Plan.Replicas), slices.Clone(j.Plan.Slots), nil
	next.Batches, next.DataShards, next.Rejoin = slices.Clone(j.Plan.Batches), slices.Clone(j.Plan.DataShards), nil
	for _, dropped := range j.Plan.Dropped {
		d := withSpares(dropped, j, next, cands, ready)
		if !canRejoin(d, ready, next, append(slices.Clone(j.Plan.Rejoin), next.Rejoin...)) {
			next.Dropped = append(next.Dropped, dropped)
			continue
		}
		next.Replicas = append(next.Replicas, d.Stages)
		next.Slots = append(next.Slots, d.Slot)
		if len(next.Batches) > 0 {
			next.Batches = append(next.Batches, d.Batch)
		}
		if len(next.DataShards) > 0 {
			next.DataShards = append(next.DataShards, d.Shards)
		}
		next.Rejoin = append(next.Rejoin, stageNodes(d.Stages)...)
	}
	if len(next.Rejoin) == 0 {
		return nil
	}
	next.ResumeStep = 0
	next.Reason = fmt.Sprintf("%s rejoin(s) in place: %d of %d replicas, the state copied from a live replica",
		strings.Join(next.Rejoin, ", "), len(next.Replicas), len(next.Replicas)+len(next.Dropped))
	return &Decision{Job: j.ID, Kind: DecisionContinue, From: j.Status, Plan: &next, Reason: next.Reason}
}

// failedRejoiners are the nodes that reported a failed worker in an in-place epoch after
// the workers were built: their copy or their first steps failed. A failure in the built
// epoch itself is a dropped replica's (a live stage whose pipeline neighbour died) and
// does not count.
func failedRejoiners(j Job) map[string]bool {
	out := map[string]bool{}
	if j.Plan == nil || !j.Plan.Continues {
		return out
	}
	for _, ev := range j.Events {
		if ev.Kind == jobspec.EventWorkerFailed && ev.By != "" && ev.Epoch > j.Plan.Built {
			out[ev.By] = true
		}
	}
	return out
}

// dropFailedRejoin continues the job without the rejoined replicas whose node reported a
// failed worker in this epoch, instead of restarting every replica from a checkpoint: the
// survivors never depended on them. nil when no rejoiner failed.
func dropFailedRejoin(j Job) *Decision {
	if j.Plan == nil || !j.Plan.Continues || len(j.Plan.Rejoin) == 0 || len(j.Plan.Slots) != len(j.Plan.Replicas) {
		return nil
	}
	failed := map[string]bool{}
	for _, ev := range j.Events {
		if ev.Kind == jobspec.EventWorkerFailed && ev.Epoch == j.Epoch && slices.Contains(j.Plan.Rejoin, ev.By) {
			failed[ev.By] = true
		}
	}
	if len(failed) == 0 {
		return nil
	}
	next := *j.Plan
	next.Replicas, next.Slots, next.Batches, next.DataShards, next.Rejoin = nil, nil, nil, nil, nil
	next.Dropped = slices.Clone(j.Plan.Dropped)
	var gone []string
	for r, stages := range j.Plan.Replicas {
		batch := 0
		if len(j.Plan.Batches) > 0 {
			batch = j.Plan.Batches[r]
		}
		var shards []int
		if len(j.Plan.DataShards) > r {
			shards = j.Plan.DataShards[r]
		}
		if anyFailed(stages, failed) {
			next.Dropped = append(next.Dropped, DroppedReplica{Slot: j.Plan.Slots[r], Stages: stages, Batch: batch, Shards: shards})
			gone = append(gone, stageNodes(stages)...)
			continue
		}
		next.Replicas, next.Slots = append(next.Replicas, stages), append(next.Slots, j.Plan.Slots[r])
		if len(j.Plan.Batches) > 0 {
			next.Batches = append(next.Batches, batch)
		}
		if len(j.Plan.DataShards) > r {
			next.DataShards = append(next.DataShards, shards)
		}
	}
	if len(next.Replicas) == 0 {
		return nil
	}
	next.Reason = fmt.Sprintf("the rejoin of %s failed; %d replicas go on in place without it", strings.Join(gone, ", "), len(next.Replicas))
	return &Decision{Job: j.ID, Kind: DecisionContinue, From: j.Status, Plan: &next, Reason: next.Reason}
}
