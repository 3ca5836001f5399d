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
	seen := 0
	for _, s := range j.Progress {
		if s.Epoch != epoch || s.StepS <= 0 {
			continue
		}
		if seen++; seen <= calibrationWarmup {
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
		PlanSpeeds: map[string]float64{}}
	for _, n := range plan.Inputs.Snapshot.Nodes {
		if plan.Has(n.ID) {
			m.PlanSpeeds[n.ID] = n.GFLOPS
			if g, ok := plan.PredictedGFLOPS[n.ID]; ok {
				m.PlanSpeeds[n.ID] = g
			}
		}
	}
	m.Factor = speedFactor(*plan, m.PlanSpeeds, m.Measured, m.Ratio())
	m.EarlyFactor = speedFactor(*plan, m.PlanSpeeds, m.Early, m.Early/m.Predicted)
	return m, true
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
	bp, ok := p.balancerPlan()
	if !ok {
		return 0, false
	}
	return p.priceWith(bp, speeds, 1)
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
}

// Calibrate derives the calibration from the jobs' plan epochs and progress samples. The gap
// of a plan with several nodes is attributed to all of them alike: the progress samples
// time whole steps, not a node's share of one.
func Calibrate(jobs []Job) Calibration {
	c := Calibration{Speeds: map[string]float64{}, Baseline: map[string]float64{}}
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
				c.Baseline[id] = max(c.Baseline[id], gflops/m.EarlyFactor)
				if m.At.After(newest[id]) {
					newest[id], c.Speeds[id] = m.At, gflops/m.Factor
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

// Apply returns members with calibrated compute speeds: a measured node's own (Speeds),
// any other's profile divided by the mesh factor, so that a node not measured yet is not
// taken for faster than the measured ones for what they all share. The members' profiles
// are not modified.
func (c Calibration) Apply(members []Member) []Member {
	f := c.meshFactor(members)
	out := slices.Clone(members)
	for i, m := range out {
		if m.Profile == nil {
			continue
		}
		p := *m.Profile
		if s, ok := c.Speeds[m.ID]; ok && s > 0 {
			p.GFLOPS = s
		} else {
			p.GFLOPS /= f
		}
		out[i].Profile = &p
	}
	return out
}
