package parallel

import (
	"fmt"
	"math"
	"slices"
	"time"

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
	// Late says the member was left out of an outer step's quorum (not there within the
	// grace window: late, dead or retired), not refused for what it sent: it is reported
	// like any rejection but never counts towards naming it an offender (offenderWatch).
	Late bool
	// Proven says the drop is proof of what the member did (a failed audit: audit.go):
	// it names the member an offender at once (offenderWatch).
	Proven bool
}

// policy is how a replica aggregates one collective and where it reports what it dropped.
type policy struct {
	rule   jobspec.Aggregate
	reject func(Rejection)
	// score, when set, returns each contribution's held-out score (NaN for nil ones):
	// the held-out loss it removes (score.go). Contributions that do not lower it are
	// dropped after the norm and distance checks.
	score func(all [][]float32) ([]heldOutScore, error)
	// length, when set, may rescale the contributions the score admitted (score.go's
	// outerLength) before they are aggregated; members are the group's, in order.
	length func(members []string, all [][]float32) error
	// scoreContested, when set and score is not, is the score of a collective whose norm
	// check is contested (contested, score.go): it then scores as score would.
	scoreContested func(all [][]float32) ([]heldOutScore, error)
	// lengthContested is length for a contested collective (with scoreContested).
	lengthContested func(members []string, all [][]float32) error
	// equalise, when set, rescales the admitted contributions of a gradient collective to
	// one length per sequence when their sizes spread over EqualiseSpread (equaliseSizes).
	equalise bool
	// batches are the members' planned batches (sequences), by node, when the replicas'
	// shares differ (nil when they are equal): the distance check compares contributions
	// per sequence (perSequence), as Worker.weigh scales each by its replica's share.
	batches map[string]float64
	// sign, when set, signs this member's contribution and requires the others'
	// signatures (signature.go); nil: nothing is signed.
	sign *signer
	// audit, when set, recomputes the members of a gather drawn from seed (audit.go), or
	// the positions targets when not nil, and says, by position, why each whose
	// contribution is not its own work is dropped, and which members it recomputed.
	audit func(members []string, all [][]float32, seed [32]byte, targets []int) (failed map[int]string, audited []int, err error)
	// ban, when set, leaves a member an audit convicted out of the run's later gathers.
	ban func(member string)
	// auditWait, when set, is how much longer than the stall timeout the gather waits
	// for the others' result digests after its audits (auditGather).
	auditWait func() time.Duration
}

// perSequence is, for each of members, the factor that makes its contribution one per
// sequence of its batch, relative to the smallest batch (1 for it); nil when the policy
// has no batches or lacks a member's.
func (p policy) perSequence(members []string) []float64 {
	if len(p.batches) == 0 {
		return nil
	}
	out, lo := make([]float64, len(members)), math.Inf(1)
	for _, id := range members {
		if !(p.batches[id] > 0) {
			return nil
		}
		lo = min(lo, p.batches[id])
	}
	for m, id := range members {
		out[m] = lo / p.batches[id]
	}
	return out
}

// checked reports whether the policy inspects every contribution: every rule but a plain
// mean over an uncompressed ring (whose members only see partial sums) gathers them.
func (p policy) robust() bool {
	return p.rule == jobspec.AggregateTrimmed || p.rule == jobspec.AggregateMedian ||
		p.rule == jobspec.AggregateCenteredClip
}

// reportProven reports the drop of a member's contribution that proves it lied (a failed
// audit) and bans the member.
func (p policy) reportProven(member, reason string) {
	if p.reject != nil {
		p.reject(Rejection{Member: member, Reason: reason, Proven: true})
	}
	if p.ban != nil {
		p.ban(member)
	}
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
	case jobspec.AggregateCenteredClip:
		if len(contribs) >= 3 {
			centeredClip(x, contribs)
			return
		}
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

// ringOrderMean writes into x the mean of every member's contribution (all R, in member
// order) with the bits of the ring all-reduce: chunk c (chunkOf) summed from member c
// round the ring, ((x_c + x_c+1) + x_c+2) + …, then scaled by 1/R.
func ringOrderMean(x []float32, all [][]float32) {
	R := len(all)
	for c := range R {
		lo, hi := len(x)*c/R, len(x)*(c+1)/R
		dst := x[lo:hi]
		copy(dst, all[c][lo:hi])
		for j := 1; j < R; j++ {
			v := all[(c+j)%R][lo:hi]
			for i := range dst {
				dst[i] += v[i]
			}
		}
	}
	inv := 1 / float32(R)
	for i := range x {
		x[i] *= inv
	}
}

// MaxDistanceRatio bounds a contribution's distance to the coordinate-wise median of the
// group's (with three or more): one more than MaxDistanceRatio times the reference (the
// lower median of the distances) is dropped. Honest contributions scatter round the median
// by a small factor of one another; one sent inside the norm bound but pointing elsewhere
// (its own update times −15) lies many times further.
const MaxDistanceRatio = 4

// outliers says, by member, why a contribution of all (nil: already dropped) lies too far
// from the others' coordinate-wise median to be aggregated; empty with fewer than three.
// scale, when not nil, multiplies each member's contribution for the check
// (policy.perSequence): contributions weighed by unequal batch shares are compared per
// sequence, or an honest replica with twice the others' batch lies about its own length
// from their median and is dropped at every sync (batches 4, 8, 4 under DiLoCo: every
// outer step; TestUnequalSharesAreNoOutliers).
func outliers(all [][]float32, scale []float64) map[int]string {
	var contribs [][]float32
	var who []int
	for m, v := range all {
		if v != nil {
			if scale != nil && scale[m] != 1 {
				v = scaled(v, scale[m])
			}
			contribs, who = append(contribs, v), append(who, m)
		}
	}
	if len(contribs) < 3 {
		return nil
	}
	centre := make([]float32, len(contribs[0]))
	coordinatewise(centre, contribs, jobspec.AggregateMedian)
	dists := make([]float64, len(contribs))
	for i, v := range contribs {
		dists[i] = distance(v, centre)
	}
	ref := refNorm(dists)
	out := map[int]string{}
	for i, d := range dists {
		if ref > 0 && d > MaxDistanceRatio*ref {
			out[who[i]] = fmt.Sprintf("distance %.3g to the group's median is over %d× the reference %.3g", d, MaxDistanceRatio, ref)
		}
	}
	return out
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

// CenteredClipIterations is how many clipped steps centeredClip takes from its centre.
const CenteredClipIterations = 3

// centeredClip writes into x CenteredClip (Karimireddy, He and Jaggi 2021, "Learning from
// History for Byzantine Robust Optimization"; Hivemind's CenteredClip): from the
// coordinate-wise median v, CenteredClipIterations steps
//
//	v ← v + (1/n) Σ_i (x_i − v)·min(1, τ/‖x_i − v‖)
//
// where τ is the lower median of the contributions' distances to the coordinate-wise
// median. A contribution then moves the result by at most τ/n per step, however far it
// lies, and τ is set by the closer half of the contributions. Every member runs it on the
// same contributions in member order and gets the same bits.
func centeredClip(x []float32, contribs [][]float32) {
	n := len(contribs)
	coordinatewise(x, contribs, jobspec.AggregateMedian)
	dists := make([]float64, n)
	for m, v := range contribs {
		dists[m] = distance(v, x)
	}
	tau := refNorm(dists)
	if tau == 0 {
		return // the closer half coincide with the median: it is the answer
	}
	step := make([]float64, len(x))
	for range CenteredClipIterations {
		clear(step)
		for _, v := range contribs {
			w := min(1, tau/distance(v, x)) / float64(n)
			for i, c := range x {
				step[i] += w * float64(v[i]-c)
			}
		}
		for i := range x {
			x[i] += float32(step[i])
		}
	}
}

// distance is ‖a − b‖ (+Inf where it is not finite).
func distance(a, b []float32) float64 {
	var s float64
	for i, v := range a {
		d := float64(v) - float64(b[i])
		s += d * d
	}
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return math.Inf(1)
	}
	return math.Sqrt(s)
}

// EqualiseSpread is how far apart the admitted gradients' norms (per sequence of each
// member's batch) of an every-step or ZeRO collective may lie before every one of them is
// counted at one length (equaliseSizes). Honest gradients lay within 1.3× of one another
// in the first 24 steps of every honest run measured (within 4.5× near convergence, where
// equalising them only evens their weights); two colluders of four that send their own
// gradient ×4, inside GradientSpread and pulling with the honest pair, weighed the mean
// 4:1 towards their batches (+4.6% with the mean, +3.0% to +3.4% with the robust rules);
// at ×2, +1.7%.
const EqualiseSpread = 2

// equaliseSizes rescales, when the policy equalises and three or more contributions of all
// (nil: dropped) have per-sequence norms (policy.perSequence) that spread over
// EqualiseSpread, each one to the lower median of those norms per sequence, its batch
// weighting kept: a size no longer weighs a contribution, only its direction and its
// replica's batch do. The lower median, so that a pair that blows its gradient up cannot
// lengthen the step (a pair that shrinks it shortens it, which AdamW, blind to the
// gradient's scale, barely feels: ×0.25 and ×0.05 stay within 0.2% unequalised). Every
// member rescales the same contributions by the same factors and keeps identical bits;
// honest collectives inside the spread keep theirs.
func (p policy) equaliseSizes(members []string, all [][]float32) {
	if !p.equalise || present(all) < 3 {
		return
	}
	scale := p.perSequence(members)
	lengths := make([]float64, len(all))
	var ok []float64
	for m, c := range all {
		if c == nil {
			continue
		}
		lengths[m] = norm2(c)
		if scale != nil {
			lengths[m] *= scale[m]
		}
		ok = append(ok, lengths[m])
	}
	if spreadWithin(ok, EqualiseSpread) || slices.Min(ok) <= 0 {
		return // honest sizes (or a zero one, which no factor lengthens)
	}
	target := refNorm(ok)
	for m, c := range all {
		if c != nil && lengths[m] != target {
			all[m] = scaled(c, target/lengths[m])
		}
	}
}

// spreadPerSequence says whether norms (as their members claim them, NaN for none), taken
// per sequence of each member's batch (scale, nil: equal batches), spread over f.
func spreadPerSequence(norms, scale []float64, f float64) bool {
	var ok []float64
	for m, n := range norms {
		if n >= 0 && !math.IsInf(n, 0) {
			if scale != nil {
				n *= scale[m]
			}
			ok = append(ok, n)
		}
	}
	return len(ok) >= 3 && !spreadWithin(ok, f)
}
