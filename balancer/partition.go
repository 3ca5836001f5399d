package balancer

import (
	"math"
	"sort"
)

// pipe is one pipeline to partition: nodes in pipeline order and the micro-batch shape.
// With links set, a stage's cost includes sending its activations to the next node in the
// order and receiving gradients back, and only a prefix of the order may be used; without
// links (the sky strategy) any node may be skipped.
type pipe struct {
	in      *instance
	order   []int
	batch   int
	m       int
	seqs    float64   // average sequences per micro-batch: time
	maxSeqs float64   // largest micro-batch: memory
	infl    []float64 // per position: bound on micro-batches in flight
	links   bool
	// replicas is the number of replicas the pipeline is one of (ZeRO divides the optimizer
	// state among them); 1 unless set.
	replicas int
}

// stageRange is the layers [first, last) on the node at position pos of the order.
type stageRange struct{ pos, first, last int }

func newPipe(in *instance, order []int, batch, m int, links bool) *pipe {
	m = min(m, batch)
	p := &pipe{in: in, order: order, batch: batch, m: m, links: links, replicas: 1,
		seqs: float64(batch) / float64(m), maxSeqs: math.Ceil(float64(batch) / float64(m))}
	p.infl = make([]float64, len(order))
	for pos := range order {
		// A stage at position pos has at most len(order)−pos stages from it to the end
		// whichever nodes end up used, so this bound is safe for every partition.
		p.infl[pos] = float64(inflight(in.sched, m, len(order), pos))
	}
	return p
}

// rate is seconds per FLOP-per-token of one micro-batch on the node at pos.
func (p *pipe) rate(pos int) float64 {
	nd := p.order[pos]
	return p.seqs * p.in.tokens / p.in.speed[nd] * p.in.microScale(nd, p.seqs)
}

func (p *pipe) compute(pos, j, e int) float64 { return p.rate(pos) * (p.in.flops[e] - p.in.flops[j]) }

// stageTime is the time of one micro-batch of layers [j, e) on the node at pos in the mode
// chooseStage picks for it (recomputation, offload I/O, and the step's optimizer I/O
// spread over the micro-batches), or +Inf where no allowed mode fits its memory.
func (p *pipe) stageTime(pos, j, e int) float64 {
	in, nd := p.in, p.order[pos]
	if !in.allowRecompute && !in.allowOffload && !in.forceRecompute { // the common case, kept cheap
		if in.stageMemory(j, e, p.maxSeqs, p.infl[pos], p.replicas, false, 0) > in.mem[nd] {
			return math.Inf(1)
		}
		return p.compute(pos, j, e)
	}
	mode, ok := in.chooseStage(nd, j, e, p.maxSeqs, p.infl[pos], p.replicas)
	if !ok {
		return math.Inf(1)
	}
	t := in.stageTimes(nd, j, e, mode)
	return t.microBatch(p.seqs) + t.optIO/float64(p.m)
}

// over reports whether layers [j, e) at pos take longer than tau or fit no allowed mode
// (tau may be +Inf: only memory then bounds a stage).
func (p *pipe) over(pos, j, e int, tau float64) bool {
	t := p.stageTime(pos, j, e)
	return t > tau || math.IsInf(t, 1)
}

// maxTime bounds stageTime at pos from above for any range that fits: every layer as it
// is, or, where the tier allows recomputation or offload, recomputed with all of its
// training state read and written as offloaded.
func (p *pipe) maxTime(pos int) float64 {
	in, nd := p.in, p.order[pos]
	if !in.allowRecompute && !in.allowOffload && !in.forceRecompute {
		return p.compute(pos, 0, in.L)
	}
	t := in.stageTimes(nd, 0, in.L, stageMode{recompute: true, offload: in.static[in.L], static: in.static[in.L]})
	return t.microBatch(p.seqs) + t.optIO/float64(p.m)
}

// boundary is the serialisation time forward and backward, and the two latencies, of the
// boundary after layer e−1 between positions pos and pos+1.
func (p *pipe) boundary(pos, e int) (x, y, lat float64) {
	a, b := p.order[pos], p.order[pos+1]
	bytes := p.seqs * p.in.tokens * p.in.out[e-1]
	bwF, latF := p.in.link(a, b)
	bwB, latB := p.in.link(b, a)
	return bytes / bwF, bytes / bwB, latF + latB
}

// furthest is the largest e in (j, L] whose stage [j, e) at pos stays within tau and memory,
// or j when not even one layer does.
func (p *pipe) furthest(pos, j int, tau float64) int {
	n := sort.Search(p.in.L-j, func(k int) bool {
		e := j + k + 1
		return p.over(pos, j, e, tau)
	})
	return j + n
}

// linkEnd is the largest end in (j, e] whose boundary to pos+1 takes ≤ tau each way, or j.
func (p *pipe) linkEnd(pos, j, e int, tau float64) int {
	a, b := p.order[pos], p.order[pos+1]
	bwF, _ := p.in.link(a, b)
	bwB, _ := p.in.link(b, a)
	limit := tau * math.Min(bwF, bwB) / (p.seqs * p.in.tokens)
	i := e - 1
	for i >= j && p.in.out[i] > limit {
		i = p.in.prevSmaller[i]
	}
	if i < j {
		return j
	}
	return i + 1
}

// feasible reports whether every layer can be placed with each stage's compute and
// boundary transfers ≤ tau and its memory within budget.
func (p *pipe) feasible(tau float64) bool {
	_, ok := p.greedy(tau)
	return ok
}

// greedy is the furthest-reach partition under tau: each node in order takes as many layers
// as tau and its memory allow. Exact for feasibility when boundary sizes do not vary.
func (p *pipe) greedy(tau float64) ([]stageRange, bool) {
	var stages []stageRange
	j := 0
	for pos := 0; pos < len(p.order) && j < p.in.L; pos++ {
		e := p.furthest(pos, j, tau)
		if p.links {
			if e < p.in.L {
				if pos == len(p.order)-1 {
					return nil, false
				}
				e = p.linkEnd(pos, j, e, tau)
			}
			if e == j {
				return nil, false
			}
		}
		if e > j {
			stages = append(stages, stageRange{pos: pos, first: j, last: e})
		}
		j = e
	}
	return stages, j == p.in.L
}

// minTau is the smallest bottleneck per micro-batch that feasible accepts (to a relative
// 1e-9), found by bisection; ok is false when no partition fits memory at all.
func (p *pipe) minTau() (tau float64, ok bool) {
	if !p.feasible(math.Inf(1)) {
		return 0, false
	}
	maxOut := 0.0
	for _, o := range p.in.out {
		maxOut = math.Max(maxOut, o)
	}
	hi := 0.0
	for pos := range p.order {
		hi = math.Max(hi, p.maxTime(pos))
		if p.links && pos+1 < len(p.order) {
			x, y := p.boundaryBytes(pos, maxOut)
			hi = math.Max(hi, math.Max(x, y))
		}
	}
	hi = hi*(1+1e-9) + 1e-12
	if !p.feasible(hi) {
		return math.Inf(1), true // only a memory-driven shape fits; the DP takes it
	}
	lo := 0.0
	for i := 0; i < 200 && hi-lo > 1e-9*hi; i++ {
		mid := (lo + hi) / 2
		if p.feasible(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, true
}

func (p *pipe) boundaryBytes(pos int, outPerToken float64) (x, y float64) {
	a, b := p.order[pos], p.order[pos+1]
	bytes := p.seqs * p.in.tokens * outPerToken
	bwF, _ := p.in.link(a, b)
	bwB, _ := p.in.link(b, a)
	return bytes / bwF, bytes / bwB
}

// minSum partitions the layers so that every stage's compute and boundary transfers stay
// ≤ tau and its memory within budget, minimising the sum over stages of compute plus
// transfer and latency: the pipeline's fill time. It is an O(len(order)·L) dynamic program
// with a monotone-deque window. ok is false when tau admits no partition.
func (p *pipe) minSum(tau float64) (stages []stageRange, sum float64, ok bool) {
	in, k, L := p.in, len(p.order), p.in.L
	inf := math.Inf(1)
	// The objective sums each stage's FLOPs as it runs when every stage recomputes
	// (memory.recompute: on); otherwise as it is (a stage that recomputes or offloads only
	// where it must is priced exactly by the estimate the candidates are judged by).
	F := in.flops
	if in.forceRecompute {
		F = in.flopsRC
	}
	prev, cur := make([]float64, L+1), make([]float64, L+1)
	choice := make([]int32, k*(L+1))
	for i := range prev {
		prev[i] = inf
	}
	prev[0] = 0
	best, bestPos := inf, -1
	deque := make([]int, 0, L+1)
	for pos := 0; pos < k; pos++ {
		a := p.rate(pos)
		key := func(j int) float64 { return prev[j] - a*F[j] }
		deque = deque[:0]
		lo := 0
		cur[0] = inf
		if !p.links {
			cur[0], choice[pos*(L+1)] = prev[0], -1
		}
		for e := 1; e <= L; e++ {
			if j := e - 1; prev[j] < inf {
				for len(deque) > 0 && key(deque[len(deque)-1]) >= key(j) {
					deque = deque[:len(deque)-1]
				}
				deque = append(deque, j)
			}
			for lo < e && p.over(pos, lo, e, tau) {
				lo++
			}
			for len(deque) > 0 && deque[0] < lo {
				deque = deque[1:]
			}
			cur[e] = inf
			if len(deque) > 0 {
				if v := key(deque[0]) + a*F[e] + p.boundaryCost(pos, e, tau); v < inf {
					cur[e], choice[pos*(L+1)+e] = v, int32(deque[0])
				}
			}
			if !p.links && prev[e] < cur[e] {
				cur[e], choice[pos*(L+1)+e] = prev[e], -1
			}
		}
		if cur[L] < best {
			best, bestPos = cur[L], pos
		}
		prev, cur = cur, prev
	}
	if bestPos < 0 {
		return nil, 0, false
	}
	for pos, e := bestPos, L; e > 0; pos-- {
		j := int(choice[pos*(L+1)+e])
		if j < 0 {
			continue
		}
		stages = append(stages, stageRange{pos: pos, first: j, last: e})
		e = j
	}
	for i, j := 0, len(stages)-1; i < j; i, j = i+1, j-1 {
		stages[i], stages[j] = stages[j], stages[i]
	}
	return stages, best, true
}

// boundaryCost is what ending a stage at e costs beyond compute: +Inf where the link to the
// next node is over tau or there is no next node.
func (p *pipe) boundaryCost(pos, e int, tau float64) float64 {
	if !p.links || e == p.in.L {
		return 0
	}
	if pos == len(p.order)-1 {
		return math.Inf(1)
	}
	x, y, lat := p.boundary(pos, e)
	if x > tau || y > tau {
		return math.Inf(1)
	}
	return x + y + lat
}

// tauCandidates lists every distinct stage cost ≥ floor, for exact search on small
// instances: the optimal bottleneck is one of them.
func (p *pipe) tauCandidates(floor float64) []float64 {
	var ts []float64
	for pos := range p.order {
		for j := 0; j < p.in.L; j++ {
			for e := j + 1; e <= p.in.L; e++ {
				t := p.stageTime(pos, j, e)
				if math.IsInf(t, 1) {
					continue
				}
				if p.links && e < p.in.L && pos+1 < len(p.order) {
					x, y, _ := p.boundary(pos, e)
					t = math.Max(t, math.Max(x, y))
				}
				if t >= floor {
					ts = append(ts, t)
				}
			}
		}
	}
	sort.Float64s(ts)
	out := ts[:0]
	for i, t := range ts {
		if i == 0 || t > out[len(out)-1]*(1+1e-12) {
			out = append(out, t)
		}
	}
	return out
}
