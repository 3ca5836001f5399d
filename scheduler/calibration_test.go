package scheduler

import (
	"math"
	"testing"
	"time"

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

// slowLinkPipeline is a job planned as one pipeline of a and b (12 MiB each, less than the
// default model's training state) over links of the given RTT, measured ratio× slower
// than predicted from its start.
func slowLinkPipeline(t *testing.T, rtt, ratio float64) (Job, []Member) {
	t.Helper()
	s := jobspec.DefaultSpec()
	s.Parallel.Replicas = jobspec.Fixed(1)
	ms := members("a", "b")
	for _, m := range ms {
		m.Profile.MemoryBytes = 12 << 20
		for i := range m.Profile.Links {
			m.Profile.Links[i].RTTSeconds, m.Profile.Links[i].BandwidthBps = rtt, 2e6
		}
	}
	return measured(running(t, s, ms), 8, ratio), ms
}

// A plan recalibrated in place is priced over the links it was planned (and calibrated)
// on: links probed while the plan's own traffic loads them read slower, and pricing them
// on top of speeds that already absorbed the gap would predict more than was measured.
func TestRecalibrationKeepsThePlansLinks(t *testing.T) {
	j, ms := slowLinkPipeline(t, 0.05, 3)
	for _, m := range ms {
		for i := range m.Profile.Links {
			m.Profile.Links[i].RTTSeconds *= 4 // probed during training
		}
	}
	h := &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	d := decision(t, h, New(Config{}))
	want := 3 * j.Plan.PredictedStepS
	if d.Kind != DecisionContinue || d.Plan == nil || math.Abs(d.Plan.PredictedStepS-want) > 0.02*want {
		t.Fatalf("%s (%s), want a recalibrated prediction of the measured %.4g s", d.Kind, d.Reason, want)
	}
}

// A pipeline over slow links spends part of its step on them, which faster or slower
// compute does not change: calibrated speeds are those at which the balancer predicts the
// plan at the measured step time, not the speeds divided by measured over predicted (with
// which it would predict less).
func TestCalibrationPricesThePlanAtItsMeasuredStep(t *testing.T) {
	j, _ := slowLinkPipeline(t, 0.05, 3)
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
