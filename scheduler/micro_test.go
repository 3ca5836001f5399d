package scheduler

import (
	"math"
	"testing"
)

// microPair is loadedPair(0) with both profiles' micro-batch efficiency set to e.
func microPair(e float64) []Member {
	ms := loadedPair(0)
	for _, m := range ms {
		m.Profile.MicroEfficiency = e
	}
	return ms
}

// The quick start's first plan (two 12 MiB nodes: one pipeline of one-sequence
// micro-batches) is priced with its nodes' micro-batch efficiency: each node's compute at
// 1/e of its one-pass rate (quick start, idle machine: node0 priced 0.058 s a step,
// computed 0.078 s; the profile's reference trained at 0.73–0.77 of its one-pass rate in
// one-sequence passes). The plan records it, and a plan measured at its prediction is
// calibrated to the nodes' own speeds, not to e of them (the efficiency stays a property
// of the node, priced again by the re-plan).
func TestFirstPlanIsPricedWithTheMicroBatchEfficiency(t *testing.T) {
	const e = 0.75
	s := pipelineSpec()
	plain, small := running(t, s, microPair(0)), running(t, s, microPair(e))
	if small.Plan.MicroBatches != 16 {
		t.Fatalf("plan of %d micro-batches, want 16 one-sequence ones (12 MiB nodes)", small.Plan.MicroBatches)
	}
	pc, sc := plain.Plan.PredictedCompute(), small.Plan.PredictedCompute()
	for id, c := range sc {
		if r := c / pc[id]; math.Abs(r-1/e) > 0.05/e {
			t.Errorf("node %s priced at %.4g s of compute, %.3f× the one-pass rate's %.4g s; want 1/%g", id, c, r, pc[id], e)
		}
	}
	if r := small.Plan.PredictedStepS / plain.Plan.PredictedStepS; !(r > 1.15) || !(r < 1/e+0.01) {
		t.Errorf("step predicted %.4g s, %.3f× the one-pass rate's %.4g s; want most of 1/%g (compute-bound)", small.Plan.PredictedStepS, r, plain.Plan.PredictedStepS, e)
	}
	for _, n := range small.Plan.Inputs.Snapshot.Nodes {
		if n.MicroEfficiency != e {
			t.Errorf("node %s planned with micro-batch efficiency %g, want %g", n.ID, n.MicroEfficiency, e)
		}
	}
	c := Calibrate([]Job{measured(small, 8, 1)})
	for id, g := range c.Speeds {
		if math.Abs(g-100) > 5 {
			t.Errorf("node %s calibrated at %.4g GFLOP/s, want its one-pass 100 (measured as predicted)", id, g)
		}
	}
	again := running(t, s, c.Apply(microPair(e)))
	if want := small.Plan.PredictedStepS; math.Abs(again.Plan.PredictedStepS-want) > 0.05*want {
		t.Errorf("re-planned on calibrated speeds: %.4g s, want about the measured %.4g s", again.Plan.PredictedStepS, want)
	}
}
