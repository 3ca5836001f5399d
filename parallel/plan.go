package parallel

import (
	"errors"
	"fmt"
)

// StagePlan is one pipeline stage: the node that runs it and its contiguous layer range
// [First, Last) of the model's layer list.
type StagePlan struct {
	Node  string `json:"node"`
	First int    `json:"first"`
	Last  int    `json:"last"`
	// Recompute says whether the stage recomputes its blocks' activations in the backward
	// pass (model.WithRecompute) instead of keeping them: the balancer sets it for a stage
	// whose memory does not fit otherwise.
	Recompute bool `json:"recompute,omitempty"`
	// MemoryBudget, when > 0, is the bytes of training state (weights, gradients, AdamW
	// moments) the stage keeps resident: the rest lives in a chunked offload store in the
	// worker's JobConfig.Train.OffloadDir (docs/memory.md, Knob 4). The balancer sets it
	// for a stage that does not fit otherwise; only a plan of one replica may have it.
	MemoryBudget int64 `json:"memory_budget,omitempty"`
}

// Plan is what the engine runs: replicas, each an ordered list of stages covering every
// layer once. Replicas may cut the model differently; a node runs at most one stage.
type Plan struct {
	Replicas [][]StagePlan `json:"replicas"`
	// Batches, when set, gives each replica its own number of sequences per step (the
	// balancer splits the batch by throughput); empty means every replica takes the job's
	// batch. Gradients and pseudo-gradients are averaged weighted by these shares.
	Batches []int `json:"batches,omitempty"`
}

// replicaBatch is the batch of replica r, its first row in the global batch, and the
// global batch, given the job's per-replica default.
func (p Plan) replicaBatch(r, def int) (batch, offset, global int) {
	if len(p.Batches) == 0 {
		return def, r * def, len(p.Replicas) * def
	}
	for k, b := range p.Batches {
		if k < r {
			offset += b
		}
		global += b
	}
	return p.Batches[r], offset, global
}

// EvenPlan cuts numLayers layers into stages of as equal counts as possible, for each of
// the replicas' node lists.
func EvenPlan(numLayers int, replicas ...[]string) Plan {
	var p Plan
	for _, nodes := range replicas {
		S := len(nodes)
		var stages []StagePlan
		for s, n := range nodes {
			stages = append(stages, StagePlan{Node: n, First: numLayers * s / S, Last: numLayers * (s + 1) / S})
		}
		p.Replicas = append(p.Replicas, stages)
	}
	return p
}

// Validate checks that every replica covers [0, numLayers) with non-empty contiguous
// stages and that no node appears twice.
func (p Plan) Validate(numLayers int) error {
	if len(p.Replicas) == 0 {
		return errors.New("plan has no replicas")
	}
	if len(p.Batches) != 0 && len(p.Batches) != len(p.Replicas) {
		return fmt.Errorf("plan has %d batch shares for %d replicas", len(p.Batches), len(p.Replicas))
	}
	for r, b := range p.Batches {
		if b < 1 {
			return fmt.Errorf("replica %d has a batch of %d", r, b)
		}
	}
	seen := map[string]bool{}
	for r, stages := range p.Replicas {
		next := 0
		for s, st := range stages {
			if st.Node == "" || seen[st.Node] {
				return fmt.Errorf("replica %d stage %d: node %q is empty or used twice", r, s, st.Node)
			}
			seen[st.Node] = true
			if st.First != next || st.Last <= st.First {
				return fmt.Errorf("replica %d stage %d: layers [%d, %d) do not continue from %d", r, s, st.First, st.Last, next)
			}
			next = st.Last
		}
		if next != numLayers {
			return fmt.Errorf("replica %d covers %d of %d layers", r, next, numLayers)
		}
	}
	return nil
}

// locate finds the replica and stage that node runs.
func (p Plan) locate(node string) (replica, stage int, ok bool) {
	for r, stages := range p.Replicas {
		for s, st := range stages {
			if st.Node == node {
				return r, s, true
			}
		}
	}
	return 0, 0, false
}

// holder is the node of replica r that holds layer l.
func (p Plan) holder(r, l int) string {
	for _, st := range p.Replicas[r] {
		if l >= st.First && l < st.Last {
			return st.Node
		}
	}
	return ""
}

// syncRun is a maximal run of consecutive layers of one stage whose holders across the
// replicas are the same nodes: they synchronise as one vector.
type syncRun struct {
	first, last int
	group       Group
}

// syncRuns splits the stage's layers into runs by holder set. Every member of a run's
// group computes the same run, so they agree on the vector they reduce.
func (p Plan) syncRuns(replica, stage int) []syncRun {
	st := p.Replicas[replica][stage]
	var runs []syncRun
	for l := st.First; l < st.Last; l++ {
		members := make([]string, len(p.Replicas))
		for r := range p.Replicas {
			members[r] = p.holder(r, l)
		}
		if n := len(runs); n > 0 && equalStrings(runs[n-1].group.Members, members) {
			runs[n-1].last = l + 1
			continue
		}
		runs = append(runs, syncRun{first: l, last: l + 1, group: Group{Members: members, Self: replica}})
	}
	return runs
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
