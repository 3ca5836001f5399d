package testnet

import (
	"context"
	"slices"
	"sync"

	"github.com/meshnode/meshnode/records"
)

// EpochStep is one plan epoch of a followed job: the step time its plan predicted against
// the one its steps measured, and each plan node's own compute time per step.
type EpochStep struct {
	Epoch uint64 `json:"epoch"`
	// PredictedStepS is the plan's predicted_step_s; 0 when the follower never saw the
	// epoch's plan (it was replaced between two reads).
	PredictedStepS float64 `json:"predicted_step_s"`
	// MeasuredStepS is the median of the epoch's progress samples' step times past its
	// first epochWarmup (all of them when it has no more), as the leader's calibration
	// measures an epoch (scheduler.MeasureEpoch); 0 without any sample.
	MeasuredStepS float64 `json:"measured_step_s"`
	// HostLoad is the largest host load (balancer.Node.HostLoad) the plan priced a node
	// of it with: what the planning node measured of other programs' load, in cores.
	HostLoad float64 `json:"host_load,omitempty"`
	// Samples is how many progress samples the epoch reported; Steps how many steps
	// they cover.
	Samples int `json:"samples"`
	Steps   int `json:"steps"`
	// Phases are each node's newest reported phase times per step in the epoch (compute,
	// transfer, bubble, sync), by node ID; PredictedComputeS what the plan priced its
	// compute at (scheduler's JobPlan.PredictedCompute).
	Phases            map[string]records.StageTimes `json:"phases,omitempty"`
	PredictedComputeS map[string]float64            `json:"predicted_compute_s,omitempty"`
}

// epochWarmup is how many of an epoch's first samples MeasuredStepS leaves out (first
// steps' allocation, data loading and pipeline fill), as the scheduler's calibration does.
const epochWarmup = 2

// epochLog records what a follower reads of a job, epoch by epoch: each plan epoch's
// prediction when it is current, each progress sample and phase report once.
type epochLog struct {
	mu        sync.Mutex
	predicted map[uint64]float64
	planned   map[uint64]map[string]float64 // predicted compute per node
	load      map[uint64]float64            // the plan's largest host load
	samples   []records.ProgressSample
	seen      map[[2]int]bool
	phases    map[uint64]map[string]records.StageTimes
}

func newEpochLog() *epochLog {
	return &epochLog{predicted: map[uint64]float64{}, planned: map[uint64]map[string]float64{}, load: map[uint64]float64{}, seen: map[[2]int]bool{}, phases: map[uint64]map[string]records.StageTimes{}}
}

// wrap returns read with every view it returns recorded.
func (l *epochLog) wrap(read func(context.Context, string) (records.JobDetail, error)) func(context.Context, string) (records.JobDetail, error) {
	return func(ctx context.Context, id string) (records.JobDetail, error) {
		job, err := read(ctx, id)
		if err == nil {
			l.record(job)
		}
		return job, err
	}
}

func (l *epochLog) record(job records.JobDetail) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pe := job.Plan; pe != nil {
		if _, ok := l.predicted[pe.Epoch]; !ok {
			p := decodePlan(pe)
			l.predicted[pe.Epoch], l.planned[pe.Epoch] = p.PredictedStepS, p.PredictedCompute()
			for _, n := range p.Inputs.Snapshot.Nodes {
				if p.Has(n.ID) {
					l.load[pe.Epoch] = max(l.load[pe.Epoch], n.HostLoad)
				}
			}
		}
	}
	for _, s := range job.Progress.Samples {
		if k := [2]int{int(s.Epoch), s.Step}; !l.seen[k] {
			l.seen[k] = true
			l.samples = append(l.samples, s)
		}
	}
	for _, st := range job.Progress.Stages {
		if l.phases[st.Epoch] == nil {
			l.phases[st.Epoch] = map[string]records.StageTimes{}
		}
		l.phases[st.Epoch][st.Node] = st
	}
}

// epochs are the recorded epochs in order.
func (l *epochLog) epochs() []EpochStep {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := epochSteps(l.predicted, l.samples, l.phases)
	for i := range out {
		out[i].PredictedComputeS, out[i].HostLoad = l.planned[out[i].Epoch], l.load[out[i].Epoch]
	}
	return out
}

// epochSteps measures every epoch that has a prediction or a sample.
func epochSteps(predicted map[uint64]float64, samples []records.ProgressSample, phases map[uint64]map[string]records.StageTimes) []EpochStep {
	by := map[uint64]*EpochStep{}
	steps := map[uint64][]float64{}
	get := func(e uint64) *EpochStep {
		if by[e] == nil {
			by[e] = &EpochStep{Epoch: e, PredictedStepS: predicted[e], Phases: phases[e]}
		}
		return by[e]
	}
	for e := range predicted {
		get(e)
	}
	for _, s := range samples {
		if s.StepSeconds <= 0 {
			continue
		}
		ep := get(s.Epoch)
		ep.Samples++
		steps[s.Epoch] = append(steps[s.Epoch], s.StepSeconds)
	}
	out := make([]EpochStep, 0, len(by))
	for e, ep := range by {
		xs := steps[e]
		if len(xs) > epochWarmup {
			xs = xs[epochWarmup:]
		}
		if len(xs) > 0 {
			ep.MeasuredStepS = medianOf(xs)
		}
		ep.Steps = stepsCovered(samples, e)
		out = append(out, *ep)
	}
	slices.SortFunc(out, func(a, b EpochStep) int { return int(a.Epoch) - int(b.Epoch) })
	return out
}

// stepsCovered is the last minus the first step of epoch's samples.
func stepsCovered(samples []records.ProgressSample, epoch uint64) int {
	first, last := -1, -1
	for _, s := range samples {
		if s.Epoch == epoch {
			if first < 0 {
				first = s.Step
			}
			last = s.Step
		}
	}
	return last - first
}

func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
