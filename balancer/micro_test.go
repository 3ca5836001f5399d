package balancer

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// quickStartJob is the quick start's default job as the balancer sees it: the default GPT
// (4 blocks, d_model 128, context 128), 16 sequences a step.
func quickStartJob(m int) Job {
	return Job{Layers: model.Config(jobspec.DefaultModel()).LayerCosts(), Batch: 16, Context: 128, MicroBatches: m}
}

// lastStage is the quick start's node0 holding layers 3–5 alone, as a one-stage plan of m
// micro-batches: nothing but its compute is priced.
func lastStage(m int) Plan {
	return Plan{MicroBatches: m, Replicas: []Replica{{Batch: 16, Stages: []Stage{{Node: "a", First: 0, Last: 6}}}}}
}

// A node whose profile measured its rate on one-sequence micro-batches at e of its rate on
// 8-sequence ones computes a plan of one-sequence micro-batches 1/e times longer, in the
// estimate, the simulator and StageCompute alike; micro-batches of 1024 tokens or more are
// priced at its rate as before. The numbers are the quick start's node0 (184 GFLOP/s
// measured on one pass of 8 sequences; the reference trained at 0.73–0.77 of that in
// passes of one sequence on the development machine).
func TestMicroEfficiencyPricesSmallMicroBatches(t *testing.T) {
	const e = 0.75
	snap := func(eff float64) Snapshot {
		return Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 184, MemoryBytes: 1 << 40, MicroEfficiency: eff}}}
	}
	for _, tc := range []struct {
		m     int
		scale float64 // compute with e over without
	}{{16, 1 / e}, {2, 1}, {1, 1}, {8, 1 / (1 - (1-e)*2/3)}, {4, 1 / (1 - (1-e)/3)}} {
		job, plan := quickStartJob(tc.m), lastStage(tc.m)
		base, err := Simulate(snap(0), job, plan)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := Simulate(snap(e), job, plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := slow.Step / base.Step; math.Abs(got-tc.scale) > 1e-9 {
			t.Errorf("%d micro-batches of %d tokens: simulated step %.4g s against %.4g s (%.4f×); want %.4f×",
				tc.m, 16/tc.m*128, slow.Step, base.Step, got, tc.scale)
		}
		if got := estimate(t, snap(e), job, plan) / estimate(t, snap(0), job, plan); math.Abs(got-tc.scale) > 1e-9 {
			t.Errorf("%d micro-batches: estimate %.4f× the unscaled one, want %.4f×", tc.m, got, tc.scale)
		}
		c0, err := StageCompute(snap(0), job, plan)
		if err != nil {
			t.Fatal(err)
		}
		c1, err := StageCompute(snap(e), job, plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := c1["a"] / c0["a"]; math.Abs(got-tc.scale) > 1e-9 {
			t.Errorf("%d micro-batches: StageCompute %.4f× the unscaled one, want %.4f×", tc.m, got, tc.scale)
		}
	}
}

// MicroEfficiency outside (0, 1) and a GPU's own speed leave the rate as it is: a node
// does not get faster than its measured rate on small micro-batches by claiming more.
func TestMicroEfficiencyBounds(t *testing.T) {
	job, plan := quickStartJob(16), lastStage(16)
	step := func(n Node) float64 {
		t.Helper()
		n.ID, n.MemoryBytes = "a", 1<<40
		sim, err := Simulate(Snapshot{Nodes: []Node{n}}, job, plan)
		if err != nil {
			t.Fatal(err)
		}
		return sim.Step
	}
	base := step(Node{GFLOPS: 184})
	for _, e := range []float64{0, -1, 1, 3, math.Inf(1), math.NaN()} {
		if got := step(Node{GFLOPS: 184, MicroEfficiency: e}); got != base {
			t.Errorf("MicroEfficiency %v: step %g s, want the unscaled %g s", e, got, base)
		}
	}
	gpu := &GPU{GFLOPS: 184}
	if got, want := step(Node{GFLOPS: 1, GPU: gpu, MicroEfficiency: 0.5}), step(Node{GFLOPS: 1, GPU: gpu}); got != want {
		t.Errorf("a GPU node's CPU-measured efficiency scaled its GPU speed: %g s, want %g s", got, want)
	}
}

// estimate is the planner's closed form of plan's step.
func estimate(t *testing.T, snap Snapshot, job Job, plan Plan) float64 {
	t.Helper()
	in, err := newInstance(snap, job)
	if err != nil {
		t.Fatal(err)
	}
	d, err := in.fromPlan(plan)
	if err != nil {
		t.Fatal(err)
	}
	return in.estimateStep(d)
}
