package scheduler

import (
	"math"
	"slices"
	"time"

	"github.com/meshnode/meshnode/balancer"
)

// Calibration compares what a plan epoch measured with what its plan predicted, and
// corrects the compute speeds the balancer plans with. It is derived from the progress
// samples and plans the FSM holds, nothing else, so every leader computes the same.
const (
	// calibrationWarmup is how many of an epoch's first samples are skipped: they hold
	// the first steps' allocation, data loading and pipeline fill.
	calibrationWarmup = 2
	// calibrationWarmupSteps is how many steps past an epoch's first sample are warm-up
	// too, however many samples they took: where a step takes longer than the progress
	// cadence, two samples cover two or three steps, while the transport's connections
	// are still growing their windows (the quick start's first plan across the emulated
	// WAN ran its first 10 steps at 1.57 s and then 0.81 s, and was recalibrated at 1.57).
	calibrationWarmupSteps = 10
	// calibrationMin is how many samples past the warm-up an epoch needs to be measured.
	calibrationMin = 3
	// calibrationWindow is how many of an epoch's newest samples its measure is the
	// median of, so a node slowed mid-epoch shows within a few samples.
	calibrationWindow = 5
)

// Measure is what one plan epoch's steps measured against its plan's prediction.
type Measure struct {
	Epoch     uint64
	Predicted float64 // the plan's predicted seconds per step
	Measured  float64 // the median step time of the epoch's newest samples
	// Early is the median step time of the epoch's first samples past the warm-up: what
	// the epoch's nodes delivered before anything changed during it.
	Early      float64
	Samples    int       // how many samples Measured is the median over
	At         time.Time // the newest of them
	PlanSpeeds map[string]float64
	// Factor and EarlyFactor are what the plan's node speeds must be divided by for the
	// balancer to predict the plan at Measured and at Early seconds a step (speedFactor):
	// the ratios, corrected for what of a step does not scale with compute speed (link
	// latency and transfer, and the co-located nodes' shares of their host).
	Factor, EarlyFactor float64
	// Compute and EarlyCompute are, for each plan node that reported its own phase times
	// in the epoch (enough of them past the warm-up), its measured compute time per step
	// over the balancer's prediction of it at its plan speed (balancer.StageCompute): the
	// median of its newest and of its first entries. 3 says the node computed 3× slower
	// than it was priced at.
	Compute, EarlyCompute map[string]float64
	// Speeds and EarlySpeeds are the plan nodes' calibrated speeds at Measured and at
	// Early: each node's plan speed divided by its own compute ratio (1 for a node without
	// one), all of them then divided by the factor that makes the balancer predict the
	// measured step with them (speedFactor), so that the step stays explained while the
	// nodes are told apart by their own compute times.
	Speeds, EarlySpeeds map[string]float64
	// HostLoad is each plan node's host load as the plan priced it (balancer.Node.HostLoad):
	// Speeds are relative to it, so a node planned at them is planned with it.
	HostLoad map[string]float64
	// Handoff is the latency every hand-off between the plan's stages paid beyond its
	// link (seconds, one way: a process waking up on a busy host, the transport's own
	// turnaround): when every node of a pipeline reported its compute, what the plan
	// must add to each link's latency to be priced at Measured with each node at its own
	// measured speed (Speeds then stay those, not scaled); 0 otherwise.
	// It is relative to the plan's links, which carry whatever hand-off latency the
	// calibration planned them with: negative when the epoch handed off faster.
	Handoff float64
}

// Ratio is measured over predicted: above 1 the plan runs slower than predicted.
func (m Measure) Ratio() float64 { return m.Measured / m.Predicted }

// MeasureEpoch measures epoch of j from its progress samples: the median step time of its
// newest calibrationWindow samples past the first calibrationWarmup; ok is false before
// calibrationMin such samples, or without a plan that predicted a step time.
func MeasureEpoch(j Job, epoch uint64) (Measure, bool) {
	var plan *JobPlan
	for _, ep := range j.Epochs {
		if ep.Epoch == epoch {
			plan = ep.Plan
		}
	}
	if plan == nil || plan.PredictedStepS <= 0 {
		return Measure{}, false
	}
	var steps []float64
	var at time.Time
	var warm warmup
	for _, s := range j.Progress {
		if s.Epoch != epoch || s.StepS <= 0 || warm.skip(s.Step) {
			continue
		}
		steps, at = append(steps, s.StepS), s.Time
	}
	if len(steps) < calibrationMin {
		return Measure{}, false
	}
	early := median(steps[:min(len(steps), calibrationWindow)])
	steps = steps[max(0, len(steps)-calibrationWindow):]
	m := Measure{Epoch: epoch, Predicted: plan.PredictedStepS, Measured: median(steps), Early: early, Samples: len(steps), At: at,
		PlanSpeeds: map[string]float64{}, HostLoad: map[string]float64{}}
	for _, n := range plan.Inputs.Snapshot.Nodes {
		if plan.Has(n.ID) {
			m.PlanSpeeds[n.ID], m.HostLoad[n.ID] = n.GFLOPS, n.HostLoad
			if g, ok := plan.PredictedGFLOPS[n.ID]; ok {
				m.PlanSpeeds[n.ID] = g
			}
		}
	}
	m.Factor = speedFactor(*plan, m.PlanSpeeds, m.Measured, m.Ratio())
	m.EarlyFactor = speedFactor(*plan, m.PlanSpeeds, m.Early, m.Early/m.Predicted)
	m.EarlyCompute, m.Compute = computeRatios(j, epoch, *plan, m.PlanSpeeds)
	m.Speeds, m.Handoff = calibratedSpeeds(*plan, m.PlanSpeeds, m.Compute, m.Measured, m.Factor)
	m.EarlySpeeds, _ = calibratedSpeeds(*plan, m.PlanSpeeds, m.EarlyCompute, m.Early, m.EarlyFactor)
	return m, true
}

// warmup tells an epoch's warm-up entries (samples or one node's phase times, in order):
// its first calibrationWarmup, and those within calibrationWarmupSteps of its first.
type warmup struct {
	seen, first int
}

// skip counts the entry of step and reports whether it is warm-up.
func (w *warmup) skip(step int) bool {
	if w.seen++; w.seen == 1 {
		w.first = step
	}
	return w.seen <= calibrationWarmup || step-w.first < calibrationWarmupSteps
}

// computeRatios are, for each node of plan with calibrationMin entries of its own phase
// times in epoch past its first calibrationWarmup, the median of its first and of its
// newest calibrationWindow entries' compute time over the balancer's prediction of its
// stage's compute at speeds; nil without any such node or when the plan cannot be priced
// again.
func computeRatios(j Job, epoch uint64, plan JobPlan, speeds map[string]float64) (early, late map[string]float64) {
	byNode := map[string][]float64{}
	warm := map[string]*warmup{}
	for _, s := range j.StageTimes {
		if s.Epoch != epoch || !(s.ComputeS > 0) || !plan.Has(s.Node) {
			continue
		}
		if warm[s.Node] == nil {
			warm[s.Node] = &warmup{}
		}
		if !warm[s.Node].skip(s.Step) {
			byNode[s.Node] = append(byNode[s.Node], s.ComputeS)
		}
	}
	if len(byNode) == 0 {
		return nil, nil
	}
	predicted, ok := plan.stageCompute(speeds)
	if !ok {
		return nil, nil
	}
	early, late = map[string]float64{}, map[string]float64{}
	for id, xs := range byNode {
		p := predicted[id]
		if len(xs) < calibrationMin || !(p > 0) {
			continue
		}
		early[id] = median(xs[:min(len(xs), calibrationWindow)]) / p
		late[id] = median(xs[max(0, len(xs)-calibrationWindow):]) / p
	}
	if len(late) == 0 {
		return nil, nil
	}
	return early, late
}

// calibratedSpeeds are the plan nodes' speeds (Measure.Speeds): each one's in speeds
// divided by its own compute ratio (1 without one). When every node has a ratio and its
// pipeline is slower than those speeds price it, the rest is the hand-offs' (handoff,
// Measure.Handoff) and the speeds stay; otherwise they are all divided by the factor that
// prices the plan at measured seconds a step with them. Without any compute ratio, every
// speed is divided by factor (the plan's gap spread over its nodes alike).
func calibratedSpeeds(plan JobPlan, speeds, ratios map[string]float64, measured, factor float64) (map[string]float64, float64) {
	out := map[string]float64{}
	if len(ratios) == 0 {
		for id, g := range speeds {
			out[id] = g / factor
		}
		return out, 0
	}
	for id, g := range speeds {
		out[id] = g
		if r := ratios[id]; r > 0 {
			out[id] = g / r
		}
	}
	step, ok := plan.priceAt(out)
	if !ok || !(step > 0) {
		return out, 0
	}
	if len(ratios) == len(speeds) && (measured > handoffMargin*step || measured*handoffMargin < step) {
		if h, ok := plan.handoffFor(out, measured); ok {
			return out, h
		}
	}
	k := speedFactor(plan, out, measured, measured/step)
	for id := range out {
		out[id] /= k
	}
	return out, 0
}

// handoffRounds bounds handoffFor's bisection; maxHandoff bounds the latency it finds;
// handoffMargin is how much slower than its nodes' own speeds price it a pipeline must
// run for the rest to be taken for its hand-offs' (less is noise: the speeds are scaled).
const (
	handoffMargin = 1.02
	handoffRounds = 30
	maxHandoff    = 1.0
)

// handoffFor is the latency h (seconds, one way) that, added to every link of the plan,
// prices it at measured seconds a step with its nodes at speeds; ok is false when no h
// does (a plan of one stage has no hand-off to price) or the plan cannot be priced. h is
// at most maxHandoff and may be negative, down to what leaves every link a latency: a
// plan made on calibrated links carries an earlier epoch's hand-off latency in them, and
// may hand off faster than that.
func (p JobPlan) handoffFor(speeds map[string]float64, measured float64) (float64, bool) {
	bp, ok := p.balancerPlan()
	if !ok {
		return 0, false
	}
	price := func(h float64) float64 {
		step, ok := p.priceWithHandoff(bp, speeds, h)
		if !ok {
			return math.NaN()
		}
		return step
	}
	lo, hi := -minRTT(p.Inputs.Snapshot.Links)/2, maxHandoff
	if !(price(hi) >= measured) || !(price(lo) < measured) {
		return 0, false
	}
	for range handoffRounds {
		mid := (lo + hi) / 2
		if price(mid) < measured {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2, true
}

// minRTT is the smallest RTT of links; 0 with none.
func minRTT(links []balancer.Link) float64 {
	if len(links) == 0 {
		return 0
	}
	m := links[0].RTT
	for _, l := range links {
		m = min(m, l.RTT)
	}
	return max(0, m)
}

// priceWithHandoff is priceWith of speeds (k 1) with h added to every link's one-way
// latency (2h to its RTT), links the snapshot leaves unmeasured included.
func (p JobPlan) priceWithHandoff(bp balancer.Plan, speeds map[string]float64, h float64) (float64, bool) {
	p.Inputs.Snapshot.Links = withHandoff(p.Inputs.Snapshot, h) // p is a copy
	return p.priceWith(bp, speeds, 1)
}

// withHandoff is snap's links with 2h added to every RTT, every ordered pair of its
// nodes given a link (an unmeasured pair as the worst measured link, as the balancer
// prices it) so that every hand-off pays h.
func withHandoff(snap balancer.Snapshot, h float64) []balancer.Link {
	if h == 0 {
		return snap.Links
	}
	worst := balancer.Link{RTT: 0.1, Bandwidth: 100e6 / 8}
	have := map[[2]string]bool{}
	out := make([]balancer.Link, 0, len(snap.Links))
	for i, l := range snap.Links {
		if i == 0 || l.RTT > worst.RTT {
			worst.RTT = l.RTT
		}
		if i == 0 || l.Bandwidth < worst.Bandwidth {
			worst.Bandwidth = l.Bandwidth
		}
		have[[2]string{l.From, l.To}] = true
		l.RTT += 2 * h
		out = append(out, l)
	}
	for _, a := range snap.Nodes {
		for _, b := range snap.Nodes {
			if a.ID != b.ID && !have[[2]string{a.ID, b.ID}] {
				out = append(out, balancer.Link{From: a.ID, To: b.ID, RTT: worst.RTT + 2*h, Bandwidth: worst.Bandwidth})
			}
		}
	}
	return out
}

// speedFactorRounds bounds speedFactor's iteration.
const speedFactorRounds = 12

// speedFactor is k such that the balancer predicts plan, every one of its nodes at its
// speed in speeds divided by k, at measured seconds a step (balancer.PlanStep). The step
// grows with k in its compute alone (link latency and transfer stay), so k is found by
// k ← k·measured/step(k) from 1, which converges to it; ratio (measured over predicted)
// where the plan cannot be priced again (an offloading stage, whose store budget the
// committed plan keeps but not its bytes) or no k reaches measured (a step faster than
// its links allow).
func speedFactor(plan JobPlan, speeds map[string]float64, measured, ratio float64) float64 {
	bp, ok := plan.balancerPlan()
	if !ok || !(measured > 0) {
		return ratio
	}
	k := 1.0
	for range speedFactorRounds {
		step, ok := plan.priceWith(bp, speeds, k)
		if !ok || !(step > 0) {
			return ratio
		}
		next := k * measured / step
		if math.Abs(next-k) <= 1e-4*k {
			return next
		}
		k = next
	}
	if k < ratio/10 || k > ratio*10 {
		return ratio
	}
	return k
}

// priceAt is the step the balancer predicts for the plan (balancer.PlanStep) with the
// nodes in speeds at those speeds (GFLOP/s), every other input as planned; ok is false
// when the plan cannot be priced again (balancerPlan).
func (p JobPlan) priceAt(speeds map[string]float64) (float64, bool) {
	return p.priceAtHandoff(speeds, 0)
}

// priceAtHandoff is priceAt with h added to every hand-off's latency (Measure.Handoff).
func (p JobPlan) priceAtHandoff(speeds map[string]float64, h float64) (float64, bool) {
	bp, ok := p.balancerPlan()
	if !ok {
		return 0, false
	}
	return p.priceWithHandoff(bp, speeds, h)
}

// priceWith is priceAt of bp, the plan's balancer form, with the speeds divided by k.
func (p JobPlan) priceWith(bp balancer.Plan, speeds map[string]float64, k float64) (float64, bool) {
	snap := p.Inputs.Snapshot
	snap.Nodes = slices.Clone(snap.Nodes)
	for i, n := range snap.Nodes {
		if g, ok := speeds[n.ID]; ok {
			snap.Nodes[i].GFLOPS, snap.Nodes[i].GPU = g/k, nil
		}
	}
	step, err := balancer.PlanStep(snap, p.Inputs.Job, bp)
	return step, err == nil
}

// stageCompute is the compute time per step the balancer predicts for each node of the
// plan (balancer.StageCompute) with the nodes in speeds at those speeds; ok as priceAt's.
func (p JobPlan) stageCompute(speeds map[string]float64) (map[string]float64, bool) {
	bp, ok := p.balancerPlan()
	if !ok {
		return nil, false
	}
	snap := p.Inputs.Snapshot
	snap.Nodes = slices.Clone(snap.Nodes)
	for i, n := range snap.Nodes {
		if g, ok := speeds[n.ID]; ok {
			snap.Nodes[i].GFLOPS, snap.Nodes[i].GPU = g, nil
		}
	}
	c, err := balancer.StageCompute(snap, p.Inputs.Job, bp)
	return c, err == nil
}

// PredictedCompute is the compute time per step the plan priced each of its nodes at
// (balancer.StageCompute at the speeds its prediction was made with: PredictedGFLOPS where
// recorded, else its inputs'), what a node's reported compute time is compared with; nil
// when the plan cannot be priced again (an offloading stage).
func (p JobPlan) PredictedCompute() map[string]float64 {
	speeds := map[string]float64{}
	for _, n := range p.Inputs.Snapshot.Nodes {
		if p.Has(n.ID) {
			speeds[n.ID] = n.GFLOPS
			if g, ok := p.PredictedGFLOPS[n.ID]; ok {
				speeds[n.ID] = g
			}
		}
	}
	c, ok := p.stageCompute(speeds)
	if !ok {
		return nil
	}
	return c
}

// balancerPlan is the balancer's form of the plan, to price it again; ok is false for a
// plan with an offloading stage (its offloaded bytes are not kept).
func (p JobPlan) balancerPlan() (balancer.Plan, bool) {
	bp := balancer.Plan{Strategy: p.Strategy, MicroBatches: p.MicroBatches, Schedule: p.Inputs.Job.Schedule}
	for i, r := range p.Replicas {
		rep := balancer.Replica{Batch: p.Inputs.Job.Batch}
		if i < len(p.Batches) {
			rep.Batch = p.Batches[i]
		}
		for _, st := range r {
			if st.MemoryBudget > 0 {
				return balancer.Plan{}, false
			}
			rep.Stages = append(rep.Stages, balancer.Stage{Node: st.Node, First: st.First, Last: st.Last, Recompute: st.Recompute})
		}
		bp.Replicas = append(bp.Replicas, rep)
	}
	return bp, len(bp.Replicas) > 0
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Calibration is what the measured plan epochs of every job say about the nodes' speeds.
type Calibration struct {
	// Baseline is each measured node's usual speed (GFLOP/s): the best over the epochs it
	// ran of the speed the epoch's plan priced it at divided by the epoch's early speed
	// factor (Measure.EarlyFactor: about the early measured-over-predicted ratio), what it
	// delivered before anything changed during an epoch.
	Baseline map[string]float64
	// Speeds are the speeds the measured nodes are planned at: the newest measured epoch's
	// (its plan's speed divided by its newest speed factor, Measure.Factor) when that is StragglerRatio× or more
	// below the baseline (the node slowed), else the baseline (a smaller difference is
	// taken for noise: it would reorder nodes of about equal speed).
	Speeds map[string]float64
	// Handoff is, for each node of a measured pipeline, the newest measured epoch's
	// latency per hand-off beyond the links (Measure.Handoff): the latency of every link
	// the node measured is planned that much longer.
	Handoff map[string]float64
	// HostLoad is, for each measured node, the host load its newest measured epoch's plan
	// priced it with (Measure.HostLoad): its Speeds are calibrated against that load, so
	// it is planned with it, not with a newer reading that its own job's load would be in.
	HostLoad map[string]float64
}

// Calibrate derives the calibration from the jobs' plan epochs, progress samples and the
// plan members' own phase times. A node that reported its compute time is priced by it
// (Measure.Speeds: a slow stage's node slow, the others not); the gap of a plan whose nodes
// reported none is attributed to all of them alike.
func Calibrate(jobs []Job) Calibration {
	c := Calibration{Speeds: map[string]float64{}, Baseline: map[string]float64{}, Handoff: map[string]float64{}, HostLoad: map[string]float64{}}
	newest := map[string]time.Time{}
	for _, j := range jobs {
		for _, ep := range j.Epochs {
			m, ok := MeasureEpoch(j, ep.Epoch)
			if !ok {
				continue
			}
			for id, gflops := range m.PlanSpeeds {
				if gflops <= 0 {
					continue
				}
				c.Baseline[id] = max(c.Baseline[id], m.EarlySpeeds[id])
				if m.At.After(newest[id]) {
					newest[id], c.Speeds[id], c.Handoff[id], c.HostLoad[id] = m.At, m.Speeds[id], m.Handoff, m.HostLoad[id]
				}
			}
		}
	}
	for id, s := range c.Speeds {
		if s*StragglerRatio > c.Baseline[id] {
			c.Speeds[id] = c.Baseline[id]
		}
	}
	return c
}

// meshFactor is how much slower than their profiles the measured nodes delivered at their
// epochs' starts (the median over them of profile over baseline speed; 1 with none): what
// is common to the mesh (nodes sharing a host's cores, the per-step overhead the closed
// form leaves out) rather than to one node.
func (c Calibration) meshFactor(members []Member) float64 {
	var fs []float64
	for _, m := range members {
		if b, ok := c.Baseline[m.ID]; ok && b > 0 && m.Profile != nil && m.Profile.GFLOPS > 0 {
			fs = append(fs, m.Profile.GFLOPS/b)
		}
	}
	if len(fs) == 0 {
		return 1
	}
	return median(fs)
}

// meshHandoff is the median of the measured nodes' hand-off latencies (0 with none): what
// a node not measured yet is planned with, as meshFactor is for its speed, so that it is
// not taken for cheaper to hand off to than the measured ones for what they share.
func (c Calibration) meshHandoff() float64 {
	var hs []float64
	for _, h := range c.Handoff {
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return 0
	}
	return median(hs)
}

// meshHostLoad is the median of the measured nodes' host loads (HostLoad), what a node not
// measured yet is planned with once some are (its profile divided by the mesh factor is
// relative to it); ok is false before any node is measured.
func (c Calibration) meshHostLoad() (float64, bool) {
	var ls []float64
	for _, l := range c.HostLoad {
		ls = append(ls, l)
	}
	if len(ls) == 0 {
		return 0, false
	}
	return median(ls), true
}

// Apply returns members with calibrated compute speeds: a measured node's own (Speeds),
// any other's profile divided by the mesh factor, so that a node not measured yet is not
// taken for faster than the measured ones for what they all share; every node with its
// links' RTTs twice its measured hand-off latency longer (Handoff; a node not measured,
// the median of the measured ones'); and every node with the host load its speed is
// calibrated against (HostLoad; a node not measured, the median of the measured ones',
// or before any is measured the load its profile carries). The members' profiles are
// not modified.
func (c Calibration) Apply(members []Member) []Member {
	f, mh := c.meshFactor(members), c.meshHandoff()
	ml, measured := c.meshHostLoad()
	out := slices.Clone(members)
	for i, m := range out {
		if m.Profile == nil {
			continue
		}
		p := *m.Profile
		if s, ok := c.Speeds[m.ID]; ok && s > 0 {
			p.GFLOPS, p.HostLoad = s, c.HostLoad[m.ID]
		} else {
			p.GFLOPS /= f
			if measured {
				p.HostLoad = ml
			}
		}
		h, ok := c.Handoff[m.ID]
		if !ok {
			h = mh
		}
		if h > 0 { // a negative one (faster than planned) adds nothing to the probed links
			p.Links = slices.Clone(p.Links)
			for j := range p.Links {
				p.Links[j].RTTSeconds += 2 * h
			}
		}
		out[i].Profile = &p
	}
	return out
}
