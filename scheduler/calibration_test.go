package scheduler

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// priceAt is the step the balancer predicts for j's plan with its nodes at speeds.
func priceAt(t *testing.T, j Job, speeds map[string]float64) float64 {
	t.Helper()
	bp, ok := j.Plan.balancerPlan()
	if !ok {
		t.Fatal("the plan does not convert")
	}
	snap := j.Plan.Inputs.Snapshot
	snap.Nodes = append([]balancer.Node(nil), snap.Nodes...)
	for i, n := range snap.Nodes {
		if g, ok := speeds[n.ID]; ok {
			snap.Nodes[i].GFLOPS = g
		}
	}
	step, err := balancer.PlanStep(snap, j.Plan.Inputs.Job, bp)
	if err != nil {
		t.Fatal(err)
	}
	return step
}

// A pipeline over slow links spends part of its step on them, which faster or slower
// compute does not change: calibrated speeds are those at which the balancer predicts the
// plan at the measured step time, not the speeds divided by measured over predicted (with
// which it would predict less).
func TestCalibrationPricesThePlanAtItsMeasuredStep(t *testing.T) {
	s := jobspec.DefaultSpec()
	s.Parallel.Replicas = jobspec.Fixed(1)
	ms := members("a", "b")
	for _, m := range ms {
		m.Profile.MemoryBytes = 12 << 20 // less than the model's training state: two stages
		for i := range m.Profile.Links {
			m.Profile.Links[i].RTTSeconds, m.Profile.Links[i].BandwidthBps = 0.05, 2e6
		}
	}
	j := measured(running(t, s, ms), 8, 3)
	want := 3 * j.Plan.PredictedStepS
	c := Calibrate([]Job{j})
	if got := priceAt(t, j, c.Speeds); math.Abs(got-want) > 0.02*want {
		t.Errorf("on calibrated speeds %v the plan is priced at %.4g s, want the measured %.4g s", c.Speeds, got, want)
	}
	plain := map[string]float64{"a": 100 / 3.0, "b": 100 / 3.0}
	if got := priceAt(t, j, plain); got > 0.95*want {
		t.Errorf("speeds divided by the ratio price the plan at %.4g s; want well under the measured %.4g s (links do not scale)", got, want)
	}
}
