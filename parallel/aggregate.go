package parallel

import (
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// MaxNormRatio bounds a contribution against the group's reference norm (the lower median
// of the contributions' norms, refNorm): one whose L2 norm is more than MaxNormRatio times
// the reference is dropped. Honest replicas compute the same quantity on different data,
// and their norms differ by a small factor; a poisoned one (1e38, an update scaled ×1000)
// is far outside. Every member computes the reference from the same contributions, so all
// drop the same ones and keep identical bits.
const MaxNormRatio = 16

// Rejection is a contribution a replica dropped before aggregating: whose, and why.
type Rejection struct {
	Member string
	Reason string
}

// policy is how a replica aggregates one collective and where it reports what it dropped.
type policy struct {
	rule   jobspec.Aggregate
	reject func(Rejection)
}

// checked reports whether the policy inspects every contribution: every rule but a plain
// mean over an uncompressed ring (whose members only see partial sums) gathers them.
func (p policy) robust() bool {
	return p.rule == jobspec.AggregateTrimmed || p.rule == jobspec.AggregateMedian
}

func (p policy) report(member, format string, args ...any) {
	if p.reject != nil {
		p.reject(Rejection{Member: member, Reason: fmt.Sprintf(format, args...)})
	}
}

// norm2 is the L2 norm of x, +Inf when x holds a non-finite value.
func norm2(x []float32) float64 {
	var s float64
	for _, v := range x {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return math.Inf(1)
		}
		s += f * f
	}
	return math.Sqrt(s)
}

// refNorm is the reference the norm bound is taken against: the lower median of the
// finite norms (with two members the smaller, so that one outsized contribution cannot
// raise its own bound), 0 when there is none.
func refNorm(norms []float64) float64 {
	var finite []float64
	for _, n := range norms {
		if !math.IsNaN(n) && !math.IsInf(n, 0) && n >= 0 {
			finite = append(finite, n)
		}
	}
	if len(finite) == 0 {
		return 0
	}
	slices.Sort(finite)
	return finite[(len(finite)-1)/2]
}

// admissible says why a contribution of norm n may not be aggregated, or "" when it may:
// it must be finite and, when the reference ref is not zero, within MaxNormRatio of it.
func admissible(n, ref float64) string {
	switch {
	case math.IsNaN(n) || math.IsInf(n, 0):
		return "not finite"
	case ref > 0 && n > MaxNormRatio*ref:
		return fmt.Sprintf("norm %.3g is over %d× the group's reference %.3g", n, MaxNormRatio, ref)
	}
	return ""
}

// combine writes into x the aggregate of the admitted contributions (in member order) by
// rule. For the mean it sums them in member order and scales by 1/len, so that with every
// contribution admitted the result has the bits of the plain mean.
func combine(x []float32, contribs [][]float32, rule jobspec.Aggregate) {
	switch rule {
	case jobspec.AggregateTrimmed, jobspec.AggregateMedian:
		coordinatewise(x, contribs, rule)
		return
	}
	clear(x)
	for _, v := range contribs {
		for i := range x {
			x[i] += v[i]
		}
	}
	inv := 1 / float32(len(contribs))
	for i := range x {
		x[i] *= inv
	}
}

// trimmedCount is how many values the trimmed mean leaves out at each end of n: a quarter,
// at least one when n ≥ 3 (with two values nothing can be trimmed).
func trimmedCount(n int) int {
	if n < 3 {
		return 0
	}
	return max(1, n/4)
}

// coordinatewise writes into x, per coordinate, the median or the trimmed mean of the
// contributions' values.
func coordinatewise(x []float32, contribs [][]float32, rule jobspec.Aggregate) {
	n := len(contribs)
	col := make([]float32, n)
	k := trimmedCount(n)
	for i := range x {
		for m, v := range contribs {
			// Insertion sort: a column has one value per replica, a handful.
			j := m
			for ; j > 0 && col[j-1] > v[i]; j-- {
				col[j] = col[j-1]
			}
			col[j] = v[i]
		}
		if rule == jobspec.AggregateMedian {
			if n%2 == 1 {
				x[i] = col[n/2]
			} else {
				x[i] = (col[n/2-1] + col[n/2]) / 2
			}
			continue
		}
		var s float32
		for _, v := range col[k : n-k] {
			s += v
		}
		x[i] = s / float32(n-2*k)
	}
}
