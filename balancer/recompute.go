package balancer

import (
	"errors"
	"math/bits"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// recomputes reports whether layer i's activations are recomputed when its stage
// recomputes: every layer that saves activations for its backward pass.
func (in *instance) recomputes(i int) bool { return in.job.Layers[i].SavedBytesPerToken > 0 }

// withRecompute is in priced for recomputing stages: each recomputed layer's backward pass
// costs one more forward pass, and a stage's activation memory is its layers' outputs per
// micro-batch in flight plus the largest layer's saved activations for one micro-batch.
func (in *instance) withRecompute() *instance {
	r := *in
	r.recompute = true
	r.flops, r.bwd = make([]float64, in.L+1), make([]float64, in.L+1)
	r.kept = make([]float64, in.L+1)
	perLayer := make([]float64, in.L)
	for i, c := range in.job.Layers {
		extra, kept := 0.0, 0.0
		if in.recomputes(i) {
			extra, kept = c.ForwardFLOPsPerToken, float64(c.OutputBytesPerToken)
		}
		r.flops[i+1] = r.flops[i] + c.FLOPsPerToken() + extra
		r.bwd[i+1] = r.bwd[i] + c.BackwardFLOPsPerToken + extra
		r.kept[i+1] = r.kept[i] + kept
		perLayer[i] = float64(c.SavedBytesPerToken)
	}
	r.savedMax = newRangeMax(perLayer)
	return &r
}

// planWithRecompute plans with the job's recomputation choice: without recomputation when
// it is off or when a plan fits without it; with it when on, or when auto and memory alone
// made every plan without it infeasible.
func (in *instance) planWithRecompute(opts Options) (Plan, error) {
	switch in.job.Recompute {
	case jobspec.RecomputeOn:
		return in.withRecompute().plan(opts)
	case jobspec.RecomputeAuto:
		p, err := in.plan(opts)
		if err == nil || !errors.Is(err, ErrInfeasible) {
			return p, err
		}
		rp, rerr := in.withRecompute().plan(opts)
		if rerr != nil {
			return Plan{}, err
		}
		rp.Reason = "recomputing activations (without: " + err.Error() + "); " + rp.Reason
		return rp, nil
	}
	return in.plan(opts)
}

// forPlan is in priced as p runs: with recomputation when any of its stages recomputes.
func (in *instance) forPlan(p Plan) *instance {
	for _, r := range p.Replicas {
		for _, s := range r.Stages {
			if s.Recompute {
				return in.withRecompute()
			}
		}
	}
	return in
}

// stageRecomputes reports whether a stage of layers [j, e) recomputes under in.
func (in *instance) stageRecomputes(j, e int) bool {
	if !in.recompute {
		return false
	}
	for i := j; i < e; i++ {
		if in.recomputes(i) {
			return true
		}
	}
	return false
}

// rangeMax answers the maximum of a fixed slice over [j, e) in constant time (a sparse
// table).
type rangeMax [][]float64

func newRangeMax(v []float64) rangeMax {
	t := rangeMax{append([]float64(nil), v...)}
	for w := 1; 2*w <= len(v); w *= 2 {
		prev, next := t[len(t)-1], make([]float64, len(v)-2*w+1)
		for i := range next {
			next[i] = max(prev[i], prev[i+w])
		}
		t = append(t, next)
	}
	return t
}

// of is the maximum over [j, e), e > j.
func (t rangeMax) of(j, e int) float64 {
	k := bits.Len(uint(e-j)) - 1
	return max(t[k][j], t[k][e-(1<<k)])
}
