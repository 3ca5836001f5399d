package balancer

import (
	"container/heap"
	"fmt"
	"math"
)

// optimalKeep is how many of the best plans by estimate the exhaustive search hands to the
// simulator for the final choice.
const optimalKeep = 24

// planOptimal is the yardstick for small instances: one pipeline, every ordered subset of
// nodes, every contiguous partition over it and every micro-batch count, each checked for
// memory and scored by the closed-form estimate; the optimalKeep best are simulated and the
// fastest in simulation wins. Exponential: refused above OptimalMaxNodes nodes or
// OptimalMaxLayers layers.
func (in *instance) planOptimal() (draft, error) {
	if in.n > OptimalMaxNodes || in.L > OptimalMaxLayers {
		return draft{}, infeasible("optimal-size", float64(in.n*in.L), OptimalMaxNodes*OptimalMaxLayers,
			"optimal is an exhaustive search limited to %d nodes and %d layers (got %d nodes, %d layers); use auto",
			OptimalMaxNodes, OptimalMaxLayers, in.n, in.L)
	}
	o := &exhaustive{in: in, ms: in.microCandidates(in.job.Batch), used: make([]bool, in.n), bounds: []int{0}}
	o.minSeqs = math.Inf(1)
	for _, m := range o.ms {
		o.minSeqs = math.Min(o.minSeqs, math.Ceil(float64(in.job.Batch)/float64(min(m, in.job.Batch))))
	}
	o.search()
	if o.top.Len() == 0 {
		return draft{}, in.activationError(newPipe(in, in.allNodes(), in.job.Batch, in.defaultMicro(), true))
	}
	pool := make([]candidate, 0, o.top.Len())
	for o.top.Len() > 0 {
		pool = append(pool, heap.Pop(&o.top).(candidate))
	}
	for i, j := 0, len(pool)-1; i < j; i, j = i+1, j-1 {
		pool[i], pool[j] = pool[j], pool[i]
	}
	best := in.judge(pool)
	best.d.note = fmt.Sprintf("exhaustive over %d plans, best %d by estimate judged by simulation", o.leaves, len(pool))
	return best.d, nil
}

type exhaustive struct {
	in      *instance
	ms      []int
	minSeqs float64 // the smallest largest-micro-batch over ms
	used    []bool
	nodes   []int
	bounds  []int
	top     worstFirst
	leaves  int
	c       [4 * OptimalMaxNodes]float64
	modes   [OptimalMaxNodes]stageMode
}

func (o *exhaustive) search() {
	j := o.bounds[len(o.bounds)-1]
	for v := 0; v < o.in.n; v++ {
		if o.used[v] {
			continue
		}
		o.used[v] = true
		o.nodes = append(o.nodes, v)
		for e := j + 1; e <= o.in.L; e++ {
			// With one one-sequence micro-batch in flight a stage needs the least memory any
			// micro-batch count gives it; past that, longer ranges only need more.
			if o.in.minNeed(j, e, o.minSeqs, 1, 1) > o.in.mem[v] {
				break
			}
			o.bounds = append(o.bounds, e)
			if e == o.in.L {
				o.leaf()
			} else if len(o.nodes) < o.in.n {
				o.search()
			}
			o.bounds = o.bounds[:len(o.bounds)-1]
		}
		o.nodes = o.nodes[:len(o.nodes)-1]
		o.used[v] = false
	}
}

func (o *exhaustive) leaf() {
	in, S, B := o.in, len(o.nodes), o.in.job.Batch
	r := replicaDraft{nodes: o.nodes, bounds: o.bounds, batch: B}
	c, comm, xmax, send := o.c[:S], o.c[S:2*S], o.c[2*S:3*S], o.c[3*S:4*S]
	for _, m := range o.ms {
		o.leaves++
		mr := min(m, B)
		modes, bad := in.tryModes(r, m, 1, o.modes[:])
		if bad >= 0 {
			continue
		}
		r.modes = modes
		est := in.pipelineTimes(r, float64(B)/float64(mr), c, comm, xmax, send) + pipelineStep(in.sched, c, comm, xmax, send, mr).step
		if o.top.Len() == optimalKeep && est >= o.top[0].est {
			continue
		}
		d := draft{m: m, replicas: []replicaDraft{{
			nodes: append([]int(nil), o.nodes...), bounds: append([]int(nil), o.bounds...), batch: B, modes: append([]stageMode(nil), modes...)}}}
		heap.Push(&o.top, candidate{d: d, est: est})
		if o.top.Len() > optimalKeep {
			heap.Pop(&o.top)
		}
	}
}

// worstFirst is a max-heap of candidates by estimate: the root is the one to drop.
type worstFirst []candidate

func (h worstFirst) Len() int           { return len(h) }
func (h worstFirst) Less(i, j int) bool { return h[i].est > h[j].est }
func (h worstFirst) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *worstFirst) Push(x any)        { *h = append(*h, x.(candidate)) }
func (h *worstFirst) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
