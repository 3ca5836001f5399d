package scheduler

import (
	"context"
	"maps"
	"math"
	"strings"
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

// stagedPipeline is a three-stage pipeline of a, b and c (equal speeds), measured at the
// step the balancer predicts with b at a third of its speed; with stages, every node also
// reports its own compute time per step: b 3× what its stage was priced at, a and c as
// priced.
func stagedPipeline(t *testing.T, stages bool) (Job, map[string]float64) {
	t.Helper()
	j := running(t, spec(), members("a", "b", "c"))
	plan := map[string]float64{}
	for _, n := range j.Plan.Inputs.Snapshot.Nodes {
		plan[n.ID] = n.GFLOPS
	}
	slow := map[string]float64{"a": plan["a"], "b": plan["b"] / 3, "c": plan["c"]}
	j = measured(j, 8, priceAt(t, j, slow)/j.Plan.PredictedStepS)
	if !stages {
		return j, plan
	}
	predicted, ok := j.Plan.stageCompute(plan)
	if !ok || len(predicted) != 3 {
		t.Fatalf("stage compute of the plan: %v, %v", predicted, ok)
	}
	for i := range 8 {
		for _, id := range []string{"a", "b", "c"} {
			c := predicted[id]
			if id == "b" {
				c *= 3
			}
			j.StageTimes = append(j.StageTimes, StageSample{Epoch: 1, Step: 10 * (i + 1), Node: id, ComputeS: c})
		}
	}
	return j, plan
}

// A node whose own compute time is 3× what its stage was priced at is calibrated at a
// third of its speed, and the other nodes of its plan keep theirs: the step's gap is the
// slow stage's, not every node's alike (as it is without the nodes' own times); the
// re-plan gives it less of the model to compute (the middle stage, which also sends both
// ways, holds one layer already, so it moves to the cheapest one).
func TestCalibrationPricesEachNodeByItsOwnCompute(t *testing.T) {
	j, plan := stagedPipeline(t, true)
	c := Calibrate([]Job{j})
	for id, want := range map[string]float64{"a": plan["a"], "b": plan["b"] / 3, "c": plan["c"]} {
		if got := c.Speeds[id]; math.Abs(got-want) > 0.02*want {
			t.Errorf("node %s calibrated at %.4g GFLOP/s, want %.4g (speeds %v)", id, got, want, c.Speeds)
		}
	}
	costs := ModelConfig(spec()).LayerCosts()
	work := func(p JobPlan, id string) (flops float64) { // per token, forward and backward
		for _, st := range p.Replicas[0] {
			for l := st.First; st.Node == id && l < st.Last; l++ {
				flops += costs[l].ForwardFLOPsPerToken + costs[l].BackwardFLOPsPerToken
			}
		}
		return flops
	}
	next, err := PlanJob(spec(), c.Apply(members("a", "b", "c")), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if before, after := work(*j.Plan, "b"), work(next, "b"); after >= before {
		t.Errorf("planned on calibrated speeds, b computes %.4g FLOPs a token (had %.4g): the slow stage keeps its share", after, before)
	}
	whole, _ := stagedPipeline(t, false)
	cw := Calibrate([]Job{whole})
	if !(cw.Speeds["a"] < 0.9*plan["a"]) || math.Abs(cw.Speeds["a"]-cw.Speeds["b"]) > 1e-9*cw.Speeds["a"] {
		t.Errorf("without the nodes' own times the gap is spread alike: speeds %v", cw.Speeds)
	}
}

// A pipeline whose nodes computed as priced but whose step is slower is paying for its
// hand-offs: the calibration finds the latency per hand-off that prices the plan at the
// measured step, keeps the nodes' speeds, and plans their links that much slower; a plan
// made on them pays fewer hand-offs (fewer micro-batches or stages). (At the quick
// start's 12 MiB a node's activation memory forces one-sequence micro-batches: there the
// hand-offs' price can only choose which nodes pair.)
func TestCalibrationPricesTheHandoffs(t *testing.T) {
	s := jobspec.DefaultSpec()
	s.Parallel.Replicas = jobspec.Fixed(1)
	ms := members("a", "b")
	for _, m := range ms {
		m.Profile.MemoryBytes = 24 << 20 // room for larger micro-batches, or the whole model
		for i := range m.Profile.Links {
			m.Profile.Links[i].RTTSeconds, m.Profile.Links[i].BandwidthBps = 1e-4, 1e9
		}
	}
	j := running(t, s, ms)
	if len(j.Plan.Replicas[0]) != 2 || j.Plan.MicroBatches < 4 {
		t.Fatalf("want a pipeline of two nodes with several micro-batches, planned %+v", j.Plan.Replicas)
	}
	plan := map[string]float64{"a": 100, "b": 100}
	bp, _ := j.Plan.balancerPlan()
	const h = 0.02
	step, ok := j.Plan.priceWithHandoff(bp, plan, h)
	if !ok {
		t.Fatal("the plan does not price")
	}
	j = measured(j, 8, step/j.Plan.PredictedStepS)
	predicted, _ := j.Plan.stageCompute(plan)
	for i := range 8 {
		for _, id := range []string{"a", "b"} {
			j.StageTimes = append(j.StageTimes, StageSample{Epoch: 1, Step: 10 * (i + 1), Node: id, ComputeS: predicted[id]})
		}
	}
	m, ok := MeasureEpoch(j, 1)
	if !ok || math.Abs(m.Handoff-h) > 0.02*h {
		t.Fatalf("measured hand-off %.4g s (ok %v), want %.4g s", m.Handoff, ok, h)
	}
	c := Calibrate([]Job{j})
	for id, g := range plan {
		if math.Abs(c.Speeds[id]-g) > 0.02*g || c.Handoff[id] != m.Handoff {
			t.Errorf("node %s: speed %.4g (want %.4g), hand-off %.4g", id, c.Speeds[id], g, c.Handoff[id])
		}
	}
	cal := c.Apply(ms)
	if got := cal[0].Profile.Links[0].RTTSeconds; math.Abs(got-(1e-4+2*m.Handoff)) > 1e-9 {
		t.Errorf("calibrated link RTT %.4g s, want %.4g", got, 1e-4+2*m.Handoff)
	}
	// A plan made on links that carry an earlier hand-off latency, handing off faster.
	baked := *j.Plan
	baked.Inputs.Snapshot.Links = withHandoff(j.Plan.Inputs.Snapshot, h)
	jb := j
	jb.Plan, jb.Epochs, jb.Progress = &baked, nil, nil
	bbp, _ := baked.balancerPlan()
	faster, _ := baked.priceWithHandoff(bbp, plan, -h/2)
	jb = measured(jb, 8, faster/baked.PredictedStepS)
	if mb, ok := MeasureEpoch(jb, 1); !ok || math.Abs(mb.Handoff+h/2) > 0.02*h {
		t.Errorf("over links carrying %.4g s, measured hand-off %.4g s (ok %v), want %.4g s", h, mb.Handoff, ok, -h/2)
	}
	other := c.Apply([]Member{member("c", 100, "a", "b", "c")})[0] // not measured: the mesh's
	if got := other.Profile.Links[0].RTTSeconds; math.Abs(got-(member("c", 100, "a").Profile.Links[0].RTTSeconds+2*m.Handoff)) > 1e-9 {
		t.Errorf("an unmeasured node's link RTT %.4g s, want its own plus %.4g", got, 2*m.Handoff)
	}
	next, err := PlanJob(s, cal, Config{})
	if err != nil {
		t.Fatal(err)
	}
	handoffs := func(p JobPlan) int { return 2 * (len(p.Replicas[0]) - 1) * p.MicroBatches }
	if handoffs(next) >= handoffs(*j.Plan) {
		t.Errorf("planned with the hand-offs priced: %d hand-offs a step, as many as before (%d)", handoffs(next), handoffs(*j.Plan))
	}
	t.Logf("stages %d → %d, replicas %d; micro-batches %d → %d; predicted %.4g s → %.4g s (measured %.4g s)", len(j.Plan.Replicas[0]), len(next.Replicas[0]), len(next.Replicas), j.Plan.MicroBatches, next.MicroBatches, j.Plan.PredictedStepS, next.PredictedStepS, step)
}

// A plan recalibrated in place because it had no checkpoint to move from is weighed again
// once it has one, when its nodes' own compute times tell them apart: the node that
// computed 3× slower than priced is left out of the next plan (the other three hold its
// layers), although the recalibrated epoch runs as predicted.
func TestRecalibratedPlanMovesOffItsSlowNode(t *testing.T) {
	ms := members("a", "b", "c", "d")
	for _, m := range ms {
		m.Profile.MemoryBytes = 12 << 20 // a pipeline of the four
	}
	sp := jobspec.DefaultSpec()
	sp.Parallel.Replicas = jobspec.Fixed(1)
	j := running(t, sp, ms)
	nodes := j.Plan.Nodes()
	slowID := j.Plan.Replicas[0][1].Node
	plan := map[string]float64{}
	for _, n := range j.Plan.Inputs.Snapshot.Nodes {
		if j.Plan.Has(n.ID) {
			plan[n.ID] = n.GFLOPS
		}
	}
	stageTimes := func(j *Job, epoch uint64, speeds map[string]float64, n int) {
		predicted, ok := j.Plan.stageCompute(speeds)
		if !ok {
			t.Fatal("the plan does not price")
		}
		for i := range n {
			for _, id := range nodes {
				c := predicted[id]
				if id == slowID && epoch == 1 {
					c *= 3
				}
				j.StageTimes = append(j.StageTimes, StageSample{Epoch: epoch, Step: 10 * (i + 1), Node: id, ComputeS: c})
			}
		}
	}
	slow := maps.Clone(plan)
	slow[slowID] /= 3
	j = measured(j, 10, priceAt(t, j, slow)/j.Plan.PredictedStepS)
	stageTimes(&j, 1, plan, 10)
	h := &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	s := New(Config{})
	if d := decision(t, h, s); d.Kind != DecisionContinue {
		t.Fatalf("%s (%s), want the prediction recalibrated in place (no checkpoint to move from)", d.Kind, d.Reason)
	}
	next := &h.JobList[0]
	for i := range 10 { // epoch 2 runs as its recalibrated plan predicts
		next.Progress = append(next.Progress, Sample{Time: t0.Add(time.Duration(40+2*i) * time.Second), Epoch: 2,
			Step: 200 + 10*i, StepS: next.Plan.PredictedStepS})
	}
	stageTimes(next, 2, next.Plan.PredictedGFLOPS, 10)
	next.Checkpoints = []Checkpoint{ckpt(next.Spec, 2, 200, nodes...)}
	h.Clock = t0.Add(2 * time.Minute)
	d := decision(t, h, s)
	if d.Kind != DecisionRebalance || d.Plan.Has(slowID) {
		t.Fatalf("%s (%s), want a rebalance off %s", d.Kind, d.Reason, slowID)
	}
}

// A plan recalibrated in place for any other reason than a move it had no checkpoint for
// (here: measured 1.35× its prediction, within StragglerRatio, with a checkpoint to move
// from) is not weighed again when its nodes' compute times later tell them apart: it would
// be weighed every growth interval for the rest of the job, and a DiLoCo job whose
// replicas go on in place restarted from a checkpoint on a loaded host's noise.
func TestRecalibratedOnItsMeritsIsNotWeighedAgain(t *testing.T) {
	ms := members("a", "b", "c", "d")
	for _, m := range ms {
		m.Profile.MemoryBytes = 12 << 20 // a pipeline of the four
	}
	sp := jobspec.DefaultSpec()
	sp.Parallel.Replicas = jobspec.Fixed(1)
	j := running(t, sp, ms)
	nodes := j.Plan.Nodes()
	slowID := j.Plan.Replicas[0][1].Node
	plan := map[string]float64{}
	for _, n := range j.Plan.Inputs.Snapshot.Nodes {
		if j.Plan.Has(n.ID) {
			plan[n.ID] = n.GFLOPS
		}
	}
	stageTimes := func(j *Job, epoch uint64, speeds map[string]float64, slowBy float64) {
		predicted, ok := j.Plan.stageCompute(speeds)
		if !ok {
			t.Fatal("the plan does not price")
		}
		for i := range 10 {
			for _, id := range nodes {
				c := predicted[id] * 1.35
				if id == slowID {
					c *= slowBy
				}
				j.StageTimes = append(j.StageTimes, StageSample{Epoch: epoch, Step: 10 * (i + 1), Node: id, ComputeS: c})
			}
		}
	}
	j = measured(j, 10, 1.35)
	stageTimes(&j, 1, plan, 1)
	j.Checkpoints = []Checkpoint{ckpt(sp, 1, 100, nodes...)}
	h := &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j}, Clock: t0.Add(30 * time.Second)}
	s := New(Config{})
	d := decision(t, h, s)
	if d.Kind != DecisionContinue || strings.HasSuffix(d.Reason, weighAgainNote) {
		t.Fatalf("%s (%s), want the prediction recalibrated in place on its merits", d.Kind, d.Reason)
	}
	next := &h.JobList[0]
	for i := range 10 { // epoch 2 runs as its recalibrated plan predicts
		next.Progress = append(next.Progress, Sample{Time: t0.Add(time.Duration(40+2*i) * time.Second), Epoch: 2,
			Step: 200 + 10*i, StepS: next.Plan.PredictedStepS})
	}
	stageTimes(next, 2, next.Plan.PredictedGFLOPS, 3) // one node's compute now reads 3× slower
	next.Checkpoints = append(next.Checkpoints, ckpt(sp, 2, 200, nodes...))
	h.Clock = t0.Add(2 * time.Minute)
	ds, err := h.Process(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.Kind == DecisionRebalance {
			t.Fatalf("%s (%s): want the recalibrated plan kept", d.Kind, d.Reason)
		}
	}
}
