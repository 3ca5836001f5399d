package scheduler

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// pipelineSpec is the default job as one replica, so that two 12 MiB nodes pipeline it.
func pipelineSpec() jobspec.Spec {
	s := jobspec.DefaultSpec()
	s.Parallel.Replicas = jobspec.Fixed(1)
	return s
}

// loadedPair is a and b (12 MiB each: one pipeline of both) on one host that other
// programs load with load cores.
func loadedPair(load float64) []Member {
	ms := members("a", "b")
	for _, m := range ms {
		m.Profile.MemoryBytes, m.Profile.Host, m.Profile.HostLoad = 12<<20, "h", load
	}
	return ms
}

// A first plan on a host that other programs load is priced with that load: its nodes
// compute slower (in the balancer's co-location model), so it predicts a longer step than
// the same plan on an idle host, and the plan records the load it was priced with.
func TestFirstPlanIsPricedWithTheHostLoad(t *testing.T) {
	s := pipelineSpec()
	idle, loaded := running(t, s, loadedPair(0)), running(t, s, loadedPair(3))
	if !(loaded.Plan.PredictedStepS > 2*idle.Plan.PredictedStepS) {
		t.Errorf("host loaded 3 cores: predicted %.4g s, idle %.4g s; want well above", loaded.Plan.PredictedStepS, idle.Plan.PredictedStepS)
	}
	for _, n := range loaded.Plan.Inputs.Snapshot.Nodes {
		if n.HostLoad != 3 {
			t.Errorf("node %s planned with host load %g, want 3", n.ID, n.HostLoad)
		}
	}
}

// A plan priced with a host load and measured at its prediction is calibrated against
// that load: its nodes keep about their speeds, and every node (measured or not) is
// planned again with the load the speeds are relative to, not a newer reading that would
// count the host's load twice; the same plan is then priced at what it measured.
func TestCalibrationKeepsTheLoadItsSpeedsAreRelativeTo(t *testing.T) {
	s := pipelineSpec()
	j := measured(running(t, s, loadedPair(3)), 8, 1)
	c := Calibrate([]Job{j})
	for id, g := range c.Speeds {
		if math.Abs(g-100) > 5 {
			t.Errorf("node %s calibrated at %.4g GFLOP/s, want its 100 (measured as predicted)", id, g)
		}
		if c.HostLoad[id] != 3 {
			t.Errorf("node %s: calibrated host load %g, want the plan's 3", id, c.HostLoad[id])
		}
	}
	later := append(loadedPair(7), member("c", 100, "a", "b"))
	later[2].Profile.MemoryBytes, later[2].Profile.Host, later[2].Profile.HostLoad = 12<<20, "h", 7
	for _, m := range c.Apply(later) {
		if m.Profile.HostLoad != 3 {
			t.Errorf("node %s planned with host load %g after calibration, want 3", m.ID, m.Profile.HostLoad)
		}
	}
	again := running(t, s, c.Apply(loadedPair(7)))
	if want := j.Plan.PredictedStepS; math.Abs(again.Plan.PredictedStepS-want) > 0.05*want {
		t.Errorf("re-planned on calibrated speeds: %.4g s, want about the measured %.4g s", again.Plan.PredictedStepS, want)
	}
}
