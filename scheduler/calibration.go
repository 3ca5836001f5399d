package scheduler

import (
	"slices"
	"time"
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
	Epoch      uint64
	Predicted  float64   // the plan's predicted seconds per step
	Measured   float64   // the median step time of the epoch's newest samples
	Samples    int       // how many samples the median is over
	At         time.Time // the newest of them
	PlanSpeeds map[string]float64
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
	steps = steps[max(0, len(steps)-calibrationWindow):]
	m := Measure{Epoch: epoch, Predicted: plan.PredictedStepS, Measured: median(steps), Samples: len(steps), At: at,
		PlanSpeeds: map[string]float64{}}
	for _, n := range plan.Inputs.Snapshot.Nodes {
		if plan.Has(n.ID) {
			m.PlanSpeeds[n.ID] = n.GFLOPS
		}
	}
	return m, true
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

// NodeSpeeds are the calibrated compute speeds (GFLOP/s) of the nodes that ran a measured
// plan epoch of any job: the speed the plan priced the node at, divided by the epoch's
// measured-over-predicted ratio; a node's newest measured epoch wins. The gap of a plan
// with several nodes is attributed to all of them alike: the progress samples time whole
// steps, not a node's share of one.
func NodeSpeeds(jobs []Job) map[string]float64 {
	speeds := map[string]float64{}
	newest := map[string]time.Time{}
	for _, j := range jobs {
		for _, ep := range j.Epochs {
			m, ok := MeasureEpoch(j, ep.Epoch)
			if !ok {
				continue
			}
			for id, gflops := range m.PlanSpeeds {
				if gflops > 0 && m.At.After(newest[id]) {
					speeds[id], newest[id] = gflops/m.Ratio(), m.At
				}
			}
		}
	}
	return speeds
}

// Calibrate returns members with the compute speed of every node in speeds replaced by
// its calibrated one (NodeSpeeds); the members' profiles are not modified.
func Calibrate(members []Member, speeds map[string]float64) []Member {
	out := slices.Clone(members)
	for i, m := range out {
		if s, ok := speeds[m.ID]; ok && m.Profile != nil && s > 0 {
			p := *m.Profile
			p.GFLOPS = s
			out[i].Profile = &p
		}
	}
	return out
}
