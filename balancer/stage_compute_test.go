package balancer

import (
	"math"
	"testing"
)

// TestStageCompute: a node's predicted compute is its stage's passes over the batch at its
// speed: halving one node's speed doubles its own and leaves the other's; a stage of more
// layers computes longer on a node of the same speed.
func TestStageCompute(t *testing.T) {
	job := smallJob()
	plan := Plan{MicroBatches: 4, Replicas: []Replica{{Batch: job.Batch, Stages: []Stage{
		{Node: "a", First: 0, Last: 1}, {Node: "b", First: 1, Last: len(job.Layers)}}}}}
	snap := func(gb float64) Snapshot {
		return Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 10, MemoryBytes: 1 << 30}, {ID: "b", GFLOPS: gb, MemoryBytes: 1 << 30}}}
	}
	base, err := StageCompute(snap(10), job, plan)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := StageCompute(snap(5), job, plan)
	if err != nil {
		t.Fatal(err)
	}
	if !(base["a"] > 0) || !(base["b"] > base["a"]) {
		t.Fatalf("compute a %g, b %g: b holds more layers at the same speed", base["a"], base["b"])
	}
	if slow["a"] != base["a"] || math.Abs(slow["b"]/base["b"]-2) > 1e-9 {
		t.Fatalf("b at half speed: a %g → %g, b %g → %g (want a unchanged, b doubled)", base["a"], slow["a"], base["b"], slow["b"])
	}
	if _, err := StageCompute(snap(10), job, Plan{MicroBatches: 1, Replicas: []Replica{{Batch: 1, Stages: []Stage{{Node: "x", First: 0, Last: len(job.Layers)}}}}}); err == nil {
		t.Fatal("a plan naming a node outside the snapshot was priced")
	}
}
