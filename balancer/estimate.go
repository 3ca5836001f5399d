package balancer

import (
	"fmt"
	"math"
	"sort"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// draft is a plan in node indices, before it is estimated and named.
type draft struct {
	replicas []replicaDraft
	m        int
	note     string // how the strategy built it, the start of Plan.Reason
}

// replicaDraft is one pipeline: stage s holds layers [bounds[s], bounds[s+1]) on nodes[s].
type replicaDraft struct {
	nodes  []int
	bounds []int
	batch  int
	// modes are the stages' recomputation and offload (nil: every stage as it is).
	modes []stageMode
}

// mode is stage s's mode.
func (r replicaDraft) mode(s int) stageMode {
	if r.modes == nil {
		return stageMode{}
	}
	return r.modes[s]
}

func (r replicaDraft) micro(m int) int { return min(m, r.batch) }

// replicaEstimate is the planner's closed-form model of one pipeline's step:
// fill (every stage's compute and every boundary's transfer once) plus (M−1) periods, the
// period being the slowest of: a stage's compute, a link's serialisation, and for 1F1B a
// stage's round trip to the end of the pipeline divided by its in-flight window.
type replicaEstimate struct {
	step, compute, transfer, bubble float64
	audit                           float64 // expected recompute of other members' work (audit.go), in step
	// boundKind is what set the period (boundCompute, boundLink, boundSends, boundWindow)
	// at boundStage.
	boundKind, boundStage int
}

const (
	boundCompute = iota
	boundLink
	boundSends
	boundWindow
)

// pipelineTimes fills c (compute per micro-batch, each pass the longer of its compute and
// its offload I/O), comm (transfer and latency both ways at the boundary after each stage),
// xmax (the slower direction's serialisation) and send (the serialisation of the stage's
// own outputs per micro-batch: its activation forward and its gradient back, which the
// worker hands to the transport inline, blocked until they are sent) for r, and returns
// the longest optimizer I/O of an offloading stage (once per step).
func (in *instance) pipelineTimes(r replicaDraft, seqs float64, c, comm, xmax, send []float64) (optIO float64) {
	S := len(r.nodes)
	for s := range send {
		send[s] = 0
	}
	for s := 0; s < S; s++ {
		if m := r.mode(s); m.recompute || m.offload > 0 {
			t := in.stageTimes(r.nodes[s], r.bounds[s], r.bounds[s+1], m)
			c[s] = t.microBatch(seqs)
			optIO = max(optIO, t.optIO)
		} else { // as it is: forward and backward FLOPs only (the hot path of the searches)
			c[s] = seqs * in.tokens * (in.flops[r.bounds[s+1]] - in.flops[r.bounds[s]]) / in.speed[r.nodes[s]] * in.microScale(r.nodes[s], seqs)
		}
		comm[s], xmax[s] = 0, 0
		if s+1 < S {
			bytes := seqs * in.tokens * in.out[r.bounds[s+1]-1]
			bwF, latF := in.link(r.nodes[s], r.nodes[s+1])
			bwB, latB := in.link(r.nodes[s+1], r.nodes[s])
			x, y := bytes/bwF, bytes/bwB
			comm[s], xmax[s] = x+y+latF+latB, math.Max(x, y)
			send[s] += x
			send[s+1] += y
		}
	}
	return optIO
}

// pipelineStep is the closed form over the per-stage times of pipelineTimes. A stage
// takes a micro-batch in per period at most: its compute and its blocking sends in series.
func pipelineStep(sched jobspec.Schedule, c, comm, xmax, send []float64, mr int) replicaEstimate {
	S := len(c)
	maxC, cStage, maxX, xStage, maxB, bStage := 0.0, 0, 0.0, 0, 0.0, 0
	for s := 0; s < S; s++ {
		if c[s] > maxC {
			maxC, cStage = c[s], s
		}
		if xmax[s] > maxX {
			maxX, xStage = xmax[s], s
		}
		if c[s]+send[s] > maxB {
			maxB, bStage = c[s]+send[s], s
		}
	}
	e := replicaEstimate{boundKind: boundCompute, boundStage: cStage}
	period := maxC
	if maxX > period {
		period, e.boundKind, e.boundStage = maxX, boundLink, xStage
	}
	if maxB > period*(1+1e-9) {
		period, e.boundKind, e.boundStage = maxB, boundSends, bStage
	}
	// Under 1F1B stage s admits a new micro-batch only when one of its w = min(M, S−s)
	// in flight has come back: the M−w micro-batches past the window each wait a round trip
	// to the end of the pipeline and back (RT_s) shared by w, so the steady part is at least
	// (M−w)·RT_s/w.
	fill, fillComm, steady := 0.0, 0.0, float64(mr-1)*period
	for s := S - 1; s >= 0; s-- {
		fill += c[s] + comm[s]
		fillComm += comm[s]
		if w := min(mr, S-s); sched == jobspec.Schedule1F1B && mr > w {
			if t := math.Ceil(float64(mr-w)/float64(w)) * fill; t > steady*(1+1e-9) {
				steady, e.boundKind, e.boundStage = t, boundWindow, s
			}
		}
	}
	e.step = fill + steady
	e.compute = float64(mr) * maxC
	e.transfer = fillComm + steady - float64(mr-1)*maxC
	e.bubble = math.Max(0, e.step-e.compute-e.transfer)
	return e
}

func (in *instance) estimateReplica(r replicaDraft, m int) replicaEstimate {
	S, mr := len(r.nodes), r.micro(m)
	buf := make([]float64, 4*S)
	c, comm, xmax, send := buf[:S], buf[S:2*S], buf[2*S:3*S], buf[3*S:]
	optIO := in.pipelineTimes(r, float64(r.batch)/float64(mr), c, comm, xmax, send)
	e := pipelineStep(in.sched, c, comm, xmax, send, mr)
	e.step += optIO
	e.compute += optIO
	if t := in.tiedExchange(r); t > 0 {
		e.step += t
		e.transfer += t
	}
	return e
}

// tiedExchange is the time a pipeline of a tied model spends per step sending the token
// table from its first stage to its last and the gradient back (model/tied.go); zero for
// one stage or an untied model.
func (in *instance) tiedExchange(r replicaDraft) float64 {
	S := len(r.nodes)
	if in.tiedTable == 0 || S < 2 {
		return 0
	}
	bwF, latF := in.link(r.nodes[0], r.nodes[S-1])
	bwB, latB := in.link(r.nodes[S-1], r.nodes[0])
	return in.tiedTable/bwF + latF + in.tiedTable/bwB + latB
}

// boundText names what bound a replica's estimate.
func (in *instance) boundText(r replicaDraft, m int, e replicaEstimate) string {
	s, S := e.boundStage, len(r.nodes)
	switch e.boundKind {
	case boundLink:
		return fmt.Sprintf("link %s→%s bandwidth", in.ids[r.nodes[s]], in.ids[r.nodes[s+1]])
	case boundSends:
		return fmt.Sprintf("compute and blocking sends on %s (stage %d of %d)", in.ids[r.nodes[s]], s, S)
	case boundWindow:
		return fmt.Sprintf("1F1B round trip from stage %d (%s) over its %d in-flight micro-batches (compute and transfer downstream)", s, in.ids[r.nodes[s]], min(r.micro(m), S-s))
	}
	what := "compute"
	if t := in.stageTimes(r.nodes[s], r.bounds[s], r.bounds[s+1], r.mode(s)); t.fwdIO+t.bwdIO > 0 {
		seqs := float64(r.batch) / float64(r.micro(m))
		if t.fwdIO+t.bwdIO > seqs*(t.fwdPerSeq+t.bwdPerSeq)*microSlowdown(t.microEff, seqs*t.tokens) {
			what = "offload I/O"
		}
	}
	return fmt.Sprintf("%s on %s (stage %d of %d, layers [%d,%d))", what, in.ids[r.nodes[s]], s, S, r.bounds[s], r.bounds[s+1])
}

// syncEstimate is the planner's model of one sync phase: every layer's holders form a ring
// in replica order and all-reduce its (compressed) parameter-sized payload in 2(R−1)
// rounds; consecutive layers with the same holders go as one bucket. The phase takes as long
// as the most loaded ring link: its bytes over its bandwidth plus a latency per round of
// every bucket crossing it. It also returns the bytes each link carries per phase.
func (in *instance) syncEstimate(d draft) (seconds float64, bytes map[[2]int]float64) {
	R := len(d.replicas)
	bytes = map[[2]int]float64{}
	if R < 2 {
		return 0, bytes
	}
	holders := in.holders(d)
	rounds := map[[2]int]float64{}
	for l := 0; l < in.L; l++ {
		share := 2 * float64(R-1) / float64(R) * in.params[l] / in.compress
		newBucket := l == 0 || !sameHolders(holders, l-1, l)
		for r := 0; r < R; r++ {
			e := [2]int{holders[r][l], holders[(r+1)%R][l]}
			bytes[e] += share
			if newBucket {
				rounds[e] += 2 * float64(R-1)
			}
		}
	}
	for e, v := range bytes {
		bw, lat := in.link(e[0], e[1])
		seconds = math.Max(seconds, v/bw+rounds[e]*lat)
	}
	return seconds, bytes
}

// holders[r][l] is the node holding layer l in replica r.
func (in *instance) holders(d draft) [][]int {
	h := make([][]int, len(d.replicas))
	for r, rep := range d.replicas {
		h[r] = make([]int, in.L)
		for s, nd := range rep.nodes {
			for l := rep.bounds[s]; l < rep.bounds[s+1]; l++ {
				h[r][l] = nd
			}
		}
	}
	return h
}

// estimate is the planner's predicted step of a draft: the slowest replica plus the
// amortised sync, and the reason naming the binding constraint.
func (in *instance) estimate(d draft) (Breakdown, string) {
	in = in.shared(d)
	var b Breakdown
	reason := ""
	es := in.replicaEstimates(d)
	for i, r := range d.replicas {
		e := es[i]
		if e.step > b.Step || reason == "" {
			b = Breakdown{Step: e.step, Compute: e.compute, Transfer: e.transfer, Bubble: e.bubble, Audit: e.audit}
			reason = in.boundText(r, d.m, e)
		}
	}
	syncPhase, _ := in.syncEstimate(d)
	b.Sync = syncPhase / in.inner
	b.Step += b.Sync
	if b.Sync > 0.5*b.Step {
		reason = fmt.Sprintf("replica sync (%.3g s per step amortised over %g steps)", b.Sync, in.inner)
	}
	return b, reason
}

// estimateStep is estimate's step time alone.
func (in *instance) estimateStep(d draft) float64 { return in.shared(d).estimateStepAlone(d) }

// estimateStepAlone is estimateStep on in's speeds as they are, co-location aside.
func (in *instance) estimateStepAlone(d draft) float64 {
	step := 0.0
	if in.audited(d) {
		for _, e := range in.replicaEstimates(d) {
			step = math.Max(step, e.step)
		}
	} else { // the planner's search calls this for every candidate: no allocation
		for _, r := range d.replicas {
			step = math.Max(step, in.estimateReplica(r, d.m).step)
		}
	}
	syncPhase, _ := in.syncEstimate(d)
	return step + syncPhase/in.inner
}

// replicaEstimates is estimateReplica of each of d's replicas, each step with its expected
// audit recompute (audit.go) added when d is audited.
func (in *instance) replicaEstimates(d draft) []replicaEstimate {
	es := make([]replicaEstimate, len(d.replicas))
	for i, r := range d.replicas {
		es[i] = in.estimateReplica(r, d.m)
	}
	if !in.audited(d) {
		return es
	}
	compute := make([]float64, len(d.replicas))
	for i := range es {
		compute[i] = es[i].compute
	}
	for i, a := range in.auditTimes(d, compute) {
		es[i].audit = a
		es[i].step += a
	}
	return es
}

// memoryCheck verifies every stage's memory in its stated mode under the plan's schedule
// and reports the first overflow.
func (in *instance) memoryCheck(d draft) error {
	R := len(d.replicas)
	for i, r := range d.replicas {
		S, mr := len(r.nodes), r.micro(d.m)
		maxSeqs := math.Ceil(float64(r.batch) / float64(mr))
		audit := in.auditMemory(d, i) // an audited replica is one stage
		for s, nd := range r.nodes {
			m, infl := r.mode(s), float64(inflight(in.sched, mr, S, s))
			need := in.stageMemory(r.bounds[s], r.bounds[s+1], maxSeqs, infl, R, m.recompute, m.offload) + audit
			if audit > 0 && need > in.mem[nd]*(1+1e-12) {
				return infeasible("audit-memory", need, in.mem[nd],
					"node %s: the whole model with %g sequences per micro-batch, and its audit worker (parallel.audit: a second copy of the training state recomputing other replicas' work), need %s but its budget is %s (short by %s); offer the node more memory (meshnode join --memory-budget), or set parallel.audit to 0",
					in.ids[nd], maxSeqs, gib(need), gib(in.mem[nd]), gib(need-in.mem[nd]))
			}
			if need > in.mem[nd]*(1+1e-12) {
				return infeasible("activation-memory", need, in.mem[nd],
					"node %s: layers [%d,%d) with %g micro-batches of %g sequences in flight need %s but its budget is %s (short by %s)",
					in.ids[nd], r.bounds[s], r.bounds[s+1], infl, maxSeqs, gib(need), gib(in.mem[nd]), gib(need-in.mem[nd]))
			}
		}
	}
	return nil
}

// toPlan names a draft and attaches its estimate, memory and link loads.
func (in *instance) toPlan(strategy jobspec.Strategy, d draft) Plan {
	b, bound := in.estimate(d)
	p := Plan{Strategy: strategy, MicroBatches: d.m, Schedule: in.sched, Predicted: b}
	p.Reason = bound
	if d.note != "" {
		p.Reason = d.note + "; bound by " + bound
	}
	loads := map[[2]int]float64{}
	R := len(d.replicas)
	for i, r := range d.replicas {
		S, mr := len(r.nodes), r.micro(d.m)
		maxSeqs := math.Ceil(float64(r.batch) / float64(mr))
		rep := Replica{Batch: r.batch}
		audit := in.auditMemory(d, i)
		for s, nd := range r.nodes {
			m := r.mode(s)
			st := Stage{Node: in.ids[nd], First: r.bounds[s], Last: r.bounds[s+1], Recompute: m.recompute, Zero: in.zeroFor(R),
				MemoryBytes: in.stageMemory(r.bounds[s], r.bounds[s+1], maxSeqs, float64(inflight(in.sched, mr, S, s)), R, m.recompute, m.offload) + audit}
			if m.offload > 0 {
				st.OffloadBytes = int64(math.Ceil(m.offload))
				st.MemoryBudget = max(1, int64(in.stageStatic(st.First, st.Last, R))-st.OffloadBytes)
			}
			rep.Stages = append(rep.Stages, st)
			if s+1 < S {
				act := float64(r.batch) * in.tokens * in.out[r.bounds[s+1]-1]
				loads[[2]int{nd, r.nodes[s+1]}] += act
				loads[[2]int{r.nodes[s+1], nd}] += act
			}
		}
		p.Replicas = append(p.Replicas, rep)
	}
	_, syncBytes := in.syncEstimate(d)
	for e, v := range syncBytes {
		loads[e] += v / in.inner
	}
	p.LinkBytes = in.sortedLoads(loads)
	p.Audited = in.audited(d)
	return p
}

func (in *instance) sortedLoads(loads map[[2]int]float64) []LinkLoad {
	out := make([]LinkLoad, 0, len(loads))
	for e, v := range loads {
		if v > 0 {
			out = append(out, LinkLoad{From: in.ids[e[0]], To: in.ids[e[1]], Bytes: v})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

// fromPlan turns a Plan back into a draft; ok is false when it names a node the instance
// lacks or its ranges do not tile the layers.
func (in *instance) fromPlan(p Plan) (draft, error) {
	d := draft{m: p.MicroBatches}
	if d.m < 1 {
		return d, fmt.Errorf("plan: micro_batches must be ≥ 1 (got %d)", p.MicroBatches)
	}
	used := map[int]bool{}
	for ri, rep := range p.Replicas {
		r := replicaDraft{batch: rep.Batch, bounds: []int{0}}
		for _, st := range rep.Stages {
			nd, ok := in.index[st.Node]
			if !ok {
				return d, fmt.Errorf("plan: replica %d: node %s is not in the snapshot", ri, st.Node)
			}
			if used[nd] {
				return d, fmt.Errorf("plan: node %s holds two stages", st.Node)
			}
			used[nd] = true
			if st.First != r.bounds[len(r.bounds)-1] || st.Last <= st.First || st.Last > in.L {
				return d, fmt.Errorf("plan: replica %d: stage on %s has layers [%d,%d), want a non-empty range from %d", ri, st.Node, st.First, st.Last, r.bounds[len(r.bounds)-1])
			}
			r.nodes = append(r.nodes, nd)
			r.bounds = append(r.bounds, st.Last)
			static := in.stageStatic(st.First, st.Last, len(p.Replicas))
			if st.OffloadBytes < 0 || float64(st.OffloadBytes) > static {
				return d, fmt.Errorf("plan: replica %d: stage on %s offloads %d bytes; it must be between 0 and its training state, %.0f bytes", ri, st.Node, st.OffloadBytes, static)
			}
			if st.Recompute && !in.stageRecomputes(st.First, st.Last) {
				return d, fmt.Errorf("plan: replica %d: stage on %s recomputes layers [%d,%d), which save no activations", ri, st.Node, st.First, st.Last)
			}
			r.modes = append(r.modes, stageMode{recompute: st.Recompute, offload: float64(st.OffloadBytes), static: static})
		}
		if r.bounds[len(r.bounds)-1] != in.L || rep.Batch < 1 {
			return d, fmt.Errorf("plan: replica %d covers layers [0,%d) of %d with batch %d", ri, r.bounds[len(r.bounds)-1], in.L, rep.Batch)
		}
		d.replicas = append(d.replicas, r)
	}
	if len(d.replicas) == 0 {
		return d, fmt.Errorf("plan: no replicas")
	}
	return d, nil
}
