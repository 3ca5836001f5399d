package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// soloSpec is a job that runs on one node.
func soloSpec() jobspec.Spec {
	s := jobspec.DefaultSpec()
	s.Parallel.Stages, s.Parallel.Replicas = jobspec.Fixed(1), jobspec.Fixed(1)
	return s
}

// measured is j, its current epoch recorded, with n progress samples of the current epoch
// each stepping ratio× the plan's prediction, one every 2 s from t0.
func measured(j Job, n int, ratio float64) Job {
	j.PlanSetAt = t0
	j.Epochs = []EpochPlan{{Epoch: j.Epoch, SetAt: t0, Plan: j.Plan}}
	for i := range n {
		j.Progress = append(j.Progress, Sample{Time: t0.Add(time.Duration(2*(i+1)) * time.Second), Epoch: j.Epoch,
			Step: 10 * (i + 1), StepS: ratio * j.Plan.PredictedStepS})
	}
	return j
}

func TestMeasureEpoch(t *testing.T) {
	j := running(t, soloSpec(), members("a"))
	for _, tc := range []struct {
		samples int
		ok      bool
	}{{0, false}, {calibrationWarmup + calibrationMin - 1, false}, {calibrationWarmup + calibrationMin, true}, {20, true}} {
		m, ok := MeasureEpoch(measured(j, tc.samples, 2), 1)
		if ok != tc.ok {
			t.Errorf("%d samples: measured %v, want %v", tc.samples, ok, tc.ok)
		}
		if ok && (m.Ratio() < 1.99 || m.Ratio() > 2.01 || m.Samples > calibrationWindow) {
			t.Errorf("%d samples: ratio %.3g over %d samples, want 2 over at most %d", tc.samples, m.Ratio(), m.Samples, calibrationWindow)
		}
	}
	// The warm-up samples are skipped: slow first steps do not count.
	w := measured(j, 6, 1)
	w.Progress[0].StepS, w.Progress[1].StepS = 50, 50
	if m, _ := MeasureEpoch(w, 1); m.Ratio() > 1.01 {
		t.Errorf("ratio %.3g with slow warm-up samples, want 1", m.Ratio())
	}
}

func TestNodeSpeedsCalibrateTheNodesOfAMeasuredPlan(t *testing.T) {
	j := measured(running(t, soloSpec(), members("a")), 8, 4)
	speeds := NodeSpeeds([]Job{j})
	if got := speeds["a"]; got < 24.9 || got > 25.1 {
		t.Fatalf("calibrated speed of a %.4g GFLOP/s, want 25 (100 measured 4× slower)", got)
	}
	ms := members("a", "b")
	cal := Calibrate(ms, speeds)
	if cal[0].Profile.GFLOPS != speeds["a"] || cal[1].Profile.GFLOPS != 100 || ms[0].Profile.GFLOPS != 100 {
		t.Errorf("calibrated members %v %v, originals %v: want a at %.3g, b and the originals untouched",
			cal[0].Profile.GFLOPS, cal[1].Profile.GFLOPS, ms[0].Profile.GFLOPS, speeds["a"])
	}
	// A new job is planned on calibrated speeds: on b, not the slow a.
	fresh := Job{ID: "k", Spec: soloSpec(), Status: jobspec.JobSubmitted}
	h := &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j, fresh}, Clock: t0.Add(time.Minute)}
	for _, d := range New(Config{}).Evaluate(h) {
		if d.Job == "k" && (d.Plan == nil || d.Plan.Has("a")) {
			t.Errorf("new job planned %+v, want it on b", d)
		}
	}
}

// TestStragglerIsReplanned: a node measured 3× slower than its plan predicted is re-planned
// onto an equal node that its profile alone would not have moved to.
func TestStragglerIsReplanned(t *testing.T) {
	for _, tc := range []struct {
		ratio  float64
		kind   DecisionKind
		resume int
	}{{1, DecisionDecline, 0}, {3, DecisionDecline, 40}, {3, DecisionRebalance, 0}} {
		j := measured(running(t, soloSpec(), members("a")), 8, tc.ratio)
		j.Plan.ResumeStep = tc.resume // 40: no checkpoint past it, nothing to move with
		j.Checkpoints = []Checkpoint{ckpt(j.Spec, 1, 40, "a")}
		h := &Harness{SelfID: "a", MemberList: members("a", "b"), JobList: []Job{j}, Clock: t0.Add(20 * time.Second)}
		d := decision(t, h, New(Config{}))
		if d.Kind != tc.kind {
			t.Fatalf("ratio %g: %s (%s), want %s", tc.ratio, d.Kind, d.Reason, tc.kind)
		}
		if tc.kind != DecisionRebalance {
			continue
		}
		if d.Plan.Has("a") || d.Plan.ResumeStep != 40 || !strings.Contains(d.Reason, "straggler") {
			t.Errorf("straggler replan %+v, want it on b from step 40 with a reason", d)
		}
		if d.Event == nil || d.Event.Kind != jobspec.EventRebalance || !strings.Contains(d.Event.Message, "3.0×") {
			t.Errorf("event %+v, want a rebalance that says 3.0×", d.Event)
		}
	}
}

// TestWatchdogReplansAnEpochWithoutProgress: an epoch with no progress sample for longer
// than WatchdogFloor (many predicted steps) gets a new epoch; before that, nothing.
func TestWatchdogReplansAnEpochWithoutProgress(t *testing.T) {
	j := measured(running(t, soloSpec(), members("a")), 3, 1)
	last := j.Progress[len(j.Progress)-1].Time
	s := New(Config{})
	h := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{j}, Clock: last.Add(WatchdogFloor / 2)}
	if ds := s.Evaluate(h); len(ds) != 0 {
		t.Fatalf("before the watchdog's wait: %+v, want nothing", ds)
	}
	h.Clock = last.Add(WatchdogFloor + time.Second)
	d := decision(t, h, s)
	if d.Kind != DecisionReplan || !strings.Contains(d.Reason, "no progress in epoch 1") {
		t.Errorf("%s: %s, want a replan for no progress", d.Kind, d.Reason)
	}
}
