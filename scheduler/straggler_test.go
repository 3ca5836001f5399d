package scheduler

import (
	"slices"
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

func TestCalibrateTheNodesOfAMeasuredPlan(t *testing.T) {
	j := measured(running(t, soloSpec(), members("a")), 8, 4)
	c := Calibrate([]Job{j})
	if got := c.Speeds["a"]; got < 24.9 || got > 25.1 {
		t.Fatalf("calibrated speed of a %.4g GFLOP/s, want 25 (100 measured 4× slower)", got)
	}
	// What all measured nodes share from their epochs' start applies to the others too.
	ms := members("a", "b")
	cal := c.Apply(ms)
	if cal[0].Profile.GFLOPS != c.Speeds["a"] || cal[1].Profile.GFLOPS != c.Speeds["a"] || ms[0].Profile.GFLOPS != 100 {
		t.Errorf("calibrated members %v %v, originals %v: want both at %.3g, the originals untouched",
			cal[0].Profile.GFLOPS, cal[1].Profile.GFLOPS, ms[0].Profile.GFLOPS, c.Speeds["a"])
	}
	// A node that slowed mid-epoch is calibrated apart from the rest: a new job is planned
	// on b, not the slowed a.
	for i := 5; i < len(j.Progress); i++ {
		j.Progress[i].StepS *= 3
	}
	c = Calibrate([]Job{j})
	if c.Speeds["a"] > 9 || c.Baseline["a"] < 24.9 {
		t.Fatalf("a slowed 3× mid-epoch: speed %.3g baseline %.3g, want about 8.3 and 25", c.Speeds["a"], c.Baseline["a"])
	}
	ms = members("a", "b")
	fresh := Job{ID: "k", Spec: soloSpec(), Status: jobspec.JobSubmitted}
	h := &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j, fresh}, Clock: t0.Add(time.Minute)}
	for _, d := range New(Config{}).Evaluate(h) {
		if d.Job == "k" && (d.Plan == nil || d.Plan.Has("a")) {
			t.Errorf("new job planned %+v, want it on b", d)
		}
	}
}

// slowedFrom is j with the step times of its samples from i on multiplied by factor.
func slowedFrom(j Job, i int, factor float64) Job {
	for ; i < len(j.Progress); i++ {
		j.Progress[i].StepS *= factor
	}
	return j
}

// TestStragglerIsReplanned: a node that slows 3× mid-epoch is re-planned onto an equal
// node that its profile alone would not have moved to; a plan 3× slower than predicted
// from its start is slower for what the whole mesh shares, and stays; so does a plan with
// no checkpoint past its resume step, its prediction recalibrated and weighed again once a
// checkpoint allows a move.
func TestStragglerIsReplanned(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ratio  float64 // from the start
		slowed float64 // from the 6th sample
		resume int
		kind   DecisionKind
	}{
		{"as predicted", 1, 1, 0, DecisionDecline},
		{"mesh-wide gap", 3, 1, 0, DecisionContinue},
		{"slowed, nothing to resume past", 1, 3, 40, DecisionContinue},
		{"slowed", 1, 3, 0, DecisionRebalance},
	} {
		j := slowedFrom(measured(running(t, soloSpec(), members("a")), 10, tc.ratio), 5, tc.slowed)
		j.Plan.ResumeStep = tc.resume
		j.Checkpoints = []Checkpoint{ckpt(j.Spec, 1, 40, "a")}
		h := &Harness{SelfID: "a", MemberList: members("a", "b"), JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
		d := decision(t, h, New(Config{}))
		if d.Kind != tc.kind {
			t.Fatalf("%s: %s (%s), want %s", tc.name, d.Kind, d.Reason, tc.kind)
		}
		if blocked := tc.resume > 0; blocked != strings.HasSuffix(d.Reason, weighAgainNote) && tc.kind == DecisionContinue {
			t.Errorf("%s: %s, want weighed again: %v", tc.name, d.Reason, blocked)
		}
		if tc.kind != DecisionRebalance {
			continue
		}
		if d.Plan.Has("a") || d.Plan.ResumeStep != 40 || !strings.Contains(d.Reason, "straggler") {
			t.Errorf("%s: replan %+v, want it on b from step 40 with a reason", tc.name, d)
		}
		if d.Event == nil || d.Event.Kind != jobspec.EventRebalance || !strings.Contains(d.Event.Message, "3.0×") {
			t.Errorf("%s: event %+v, want a rebalance that says 3.0×", tc.name, d.Event)
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

// TestPredictionIsRecalibratedOnce: a plan that stays but runs 3× slower than predicted from
// its start gets, once, an in-place epoch (no restore) with the same stages whose
// prediction is the measured step time; that epoch, measured, is not recalibrated again.
func TestPredictionIsRecalibratedOnce(t *testing.T) {
	j := measured(running(t, soloSpec(), members("a")), 10, 3)
	j.Plan.ResumeStep = 20 // the epoch resumed from a checkpoint: the in-place one keeps it
	h := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	d := decision(t, h, New(Config{}))
	if d.Kind != DecisionContinue || !d.Plan.Continues || !strings.HasPrefix(d.Reason, recalibratedReason) {
		t.Fatalf("%s (%s), want an in-place recalibration", d.Kind, d.Reason)
	}
	want := 3 * j.Plan.PredictedStepS
	if got := d.Plan.PredictedStepS; got < 0.95*want || got > 1.05*want {
		t.Errorf("recalibrated prediction %.4g s, want the measured %.4g s", got, want)
	}
	if len(d.Plan.Replicas) != 1 || d.Plan.Replicas[0][0] != j.Plan.Replicas[0][0] || d.Plan.ResumeStep != j.Plan.ResumeStep {
		t.Errorf("recalibrated plan %+v, want the same stages %+v", d.Plan.Replicas, j.Plan.Replicas)
	}
	next := h.JobList[0] // epoch 2, committed by the harness
	next = measured(next, 10, 1.5)
	h2 := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{next}, Clock: t0.Add(time.Minute)}
	if ds := New(Config{}).Evaluate(h2); len(ds) != 0 && ds[0].Kind != DecisionDecline {
		t.Errorf("a recalibrated epoch 1.5× off: %+v, want no new epoch", ds)
	}
}

// TestSlowedAtAnEpochStartIsAStraggler: a node that slows right as a new epoch starts shows
// no change within that epoch; against its baseline from the epoch before, it is the one
// that slowed, and is re-planned.
func TestSlowedAtAnEpochStartIsAStraggler(t *testing.T) {
	j := measured(running(t, soloSpec(), members("a")), 10, 4)
	j.Checkpoints = []Checkpoint{ckpt(j.Spec, 1, 40, "a")}
	h := &Harness{SelfID: "a", MemberList: members("a", "b"), JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	s := New(Config{})
	if d := decision(t, h, s); d.Kind != DecisionContinue {
		t.Fatalf("%s (%s), want the prediction recalibrated in place", d.Kind, d.Reason)
	}
	next := &h.JobList[0]
	for i := range 10 { // epoch 2's samples, every one 3× its calibrated prediction
		next.Progress = append(next.Progress, Sample{Time: t0.Add(time.Duration(40+2*i) * time.Second), Epoch: 2,
			Step: 200 + 10*i, StepS: 3 * next.Plan.PredictedStepS})
	}
	c := Calibrate([]Job{*next})
	if c.Speeds["a"] > 9 || c.Baseline["a"] < 24.9 {
		t.Errorf("speed %.3g, baseline %.3g: want about 8.3 and 25", c.Speeds["a"], c.Baseline["a"])
	}
	h.Clock = t0.Add(2 * time.Minute)
	if d := decision(t, h, s); d.Kind != DecisionRebalance || d.Plan.Has("a") {
		t.Errorf("%s (%s), want a straggler rebalance onto b", d.Kind, d.Reason)
	}
}

// Where a step takes longer than the progress cadence, the first samples cover a step or
// two each: the epoch's first calibrationWarmupSteps steps are warm-up however many
// samples they took, so a transport still growing its windows (the quick start's first
// plan across the emulated WAN ran its first 10 steps twice as slow as the rest) neither
// sets the measure nor the early one.
func TestMeasureEpochSkipsTheFirstSteps(t *testing.T) {
	j := running(t, soloSpec(), members("a"))
	j = measured(j, 0, 1)
	for i := range 16 {
		ratio := 1.0
		if i < calibrationWarmupSteps {
			ratio = 2
		}
		j.Progress = append(j.Progress, Sample{Time: t0.Add(time.Duration(i+1) * time.Second), Epoch: j.Epoch,
			Step: i + 1, StepS: ratio * j.Plan.PredictedStepS})
	}
	m, ok := MeasureEpoch(j, 1)
	if !ok {
		t.Fatal("an epoch of 16 samples past its warm-up steps is not measured")
	}
	if m.Ratio() > 1.01 || m.Early > 1.01*m.Predicted {
		t.Errorf("measured %.3g and early %.3g of the predicted step, want 1: the first %d steps are warm-up", m.Ratio(), m.Early/m.Predicted, calibrationWarmupSteps)
	}
}

// TestFirstMeasureIsWeighedAtOnce: an epoch weighed before it had a measure (too few
// samples) is weighed again as soon as it has one, within the GrowthInterval: a first
// plan's prediction is recalibrated a few samples into the epoch, not an interval later.
func TestFirstMeasureIsWeighedAtOnce(t *testing.T) {
	j := measured(running(t, soloSpec(), members("a")), calibrationWarmup+calibrationMin-1, 2)
	s := New(Config{GrowthInterval: time.Hour})
	clock := t0.Add(20 * time.Second)
	h := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{j}, Clock: clock}
	if ds := s.Evaluate(h); len(ds) != 0 {
		t.Fatalf("before the epoch is measured: %+v, want nothing", ds)
	}
	h.JobList = []Job{measured(j, calibrationWarmup+calibrationMin, 2)}
	h.JobList[0].Progress = h.JobList[0].Progress[len(j.Progress):]
	h.Clock = clock.Add(time.Second)
	d := decision(t, h, s)
	if d.Kind != DecisionContinue || !strings.HasPrefix(d.Reason, recalibratedReason) {
		t.Fatalf("%s (%s), want the first measure recalibrated at once", d.Kind, d.Reason)
	}
	h.Clock = clock.Add(2 * time.Second) // the same measure is not weighed again within the interval
	if ds := s.Evaluate(h); len(ds) != 0 {
		t.Errorf("the same epoch's measure again within the interval: %+v, want nothing", ds)
	}
}

// TestSlightlyOffPredictionIsRecalibrated: a first plan whose steps run 1.2× its
// prediction (the quick start's co-located stages, measured 1.16–1.24×) is recalibrated:
// left at 1.2×, the evaluations on top took the job's step time past 25% of it.
func TestSlightlyOffPredictionIsRecalibrated(t *testing.T) {
	for _, ratio := range []float64{1.2, 1 / 1.2} {
		j := measured(running(t, soloSpec(), members("a")), 10, ratio)
		h := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
		d := decision(t, h, New(Config{}))
		if d.Kind != DecisionContinue || !strings.HasPrefix(d.Reason, recalibratedReason) {
			t.Errorf("%.3g×: %s (%s), want the prediction recalibrated", ratio, d.Kind, d.Reason)
		}
	}
	j := measured(running(t, soloSpec(), members("a")), 10, 1.1)
	h := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	if ds := New(Config{}).Evaluate(h); len(ds) != 0 && ds[0].Kind != DecisionDecline {
		t.Errorf("1.1×: %+v, want the prediction kept", ds)
	}
}

// TestFasterSpareDoesNotStopARecalibration: a fixed 1 × 2 job whose prediction is 1.2× off
// is recalibrated in place though an idle spare profiles faster than both of its nodes
// (where the spec bounds the nodes, the spare cut a plan node from the inputs, and the
// plan went without its corrected prediction).
func TestFasterSpareDoesNotStopARecalibration(t *testing.T) {
	s := soloSpec()
	s.Parallel.Stages, s.Parallel.Replicas = jobspec.Fixed(1), jobspec.Fixed(2)
	ms := members("a", "b")
	j := measured(running(t, s, ms), 10, 1.2)
	spare := members("c")[0]
	p := *spare.Profile
	p.GFLOPS *= 10
	spare.Profile = &p
	h := &Harness{SelfID: "a", MemberList: append(slices.Clone(ms), spare), JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	d := decision(t, h, New(Config{}))
	if d.Kind != DecisionContinue || !strings.HasPrefix(d.Reason, recalibratedReason) {
		t.Fatalf("%s (%s), want the prediction recalibrated", d.Kind, d.Reason)
	}
}
