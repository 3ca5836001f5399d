package balancer

import (
	"container/heap"
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Simulation is the simulator's account of one training step of a plan.
type Simulation struct {
	// Step is the simulated step time: the slowest replica's pipeline phase plus the sync
	// phase amortised over the steps between syncs.
	Step float64 `json:"step_s"`
	// Replicas is each replica's pipeline phase, from the first forward pass to the last
	// backward pass.
	Replicas []float64 `json:"replica_s"`
	// SyncPhase is one whole sync phase (every layer once); Sync is its per-step share.
	SyncPhase float64 `json:"sync_phase_s"`
	Sync      float64 `json:"sync_s"`
	// SyncEvent is the longest single sync event: the whole phase, except in streaming,
	// whose phase is spread over the outer period as Fragments events of about 1/Fragments
	// of the parameters each (SyncPhase ÷ Fragments; the fragments are balanced by
	// parameter count, not exactly equal).
	SyncEvent float64 `json:"sync_event_s"`
	// LinkBytes is the traffic per step on each directed link, sync amortised.
	LinkBytes []LinkLoad `json:"link_bytes"`
	// Events is the number of events processed.
	Events int `json:"events"`
}

// Simulate runs one training step of plan as a discrete-event simulation: every node
// computes its stage's forward and backward passes one at a time in the schedule's order
// (GPipe or 1F1B), each forward and backward time derived from the layer costs and the
// node's speed; every activation and gradient crosses its directed link as a serial FIFO
// resource (start when the link is free, hold it for bytes/bandwidth, arrive RTT/2 later),
// and its sender starts its next pass only once it is serialised (the worker sends inline);
// then replicas all-reduce every layer in rings, links again serial. It shares no code with
// the planner's estimate. The plan's memory is not checked here.
func Simulate(snap Snapshot, job Job, plan Plan) (Simulation, error) {
	in, err := newInstance(snap, job)
	if err != nil {
		return Simulation{}, err
	}
	d, err := in.fromPlan(plan)
	if err != nil {
		return Simulation{}, err
	}
	return in.simulate(d), nil
}

func (in *instance) simulate(d draft) Simulation {
	in = in.shared(d) // the speeds co-located nodes get (colocation.go), as the estimate prices them
	var sim Simulation
	loads := map[[2]int]float64{}
	var audits []float64 // recomputing other members' work, between the steps (audit.go)
	if in.audited(d) {
		compute := make([]float64, len(d.replicas))
		for i, r := range d.replicas {
			compute[i] = in.estimateReplica(r, d.m).compute
		}
		audits = in.auditTimes(d, compute)
	}
	for i, r := range d.replicas {
		t, events := in.simulateReplica(r, d.m, loads)
		if audits != nil {
			t += audits[i]
		}
		if S := len(r.nodes); in.tiedTable > 0 && S > 1 {
			// A tied model's table goes from the first stage to the last before the
			// step, its gradient back after the backward passes (model/tied.go).
			a, b := r.nodes[0], r.nodes[S-1]
			bwF, latF := in.link(a, b)
			bwB, latB := in.link(b, a)
			t += in.tiedTable/bwF + latF + in.tiedTable/bwB + latB
			loads[[2]int{a, b}] += in.tiedTable
			loads[[2]int{b, a}] += in.tiedTable
		}
		sim.Replicas = append(sim.Replicas, t)
		sim.Step = math.Max(sim.Step, t)
		sim.Events += events
	}
	sim.SyncPhase = in.simulateSync(d, loads)
	sim.Sync = sim.SyncPhase / in.inner
	sim.SyncEvent = sim.SyncPhase / in.fragments
	sim.Step += sim.Sync
	sim.LinkBytes = in.sortedLoads(loads)
	return sim
}

// simEvents is the number of events simulating d would take, to bound the planner's use.
func simEvents(d draft) int {
	n := 0
	for _, r := range d.replicas {
		n += 4 * len(r.nodes) * r.micro(d.m)
	}
	return n
}

const (
	evComputeDone = iota
	evActivationArrives
	evGradientArrives
)

type simEvent struct {
	t           float64
	seq         int
	kind, stage int
	mb          int
	forward     bool
}

type eventQueue []simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].t != q[j].t {
		return q[i].t < q[j].t
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simOp struct {
	forward bool
	mb      int
}

// scheduleOps is the order in which stage s of S runs its passes over m micro-batches.
func scheduleOps(sched jobspec.Schedule, s, S, m int) []simOp {
	ops := make([]simOp, 0, 2*m)
	if sched == jobspec.ScheduleGPipe {
		for i := 0; i < m; i++ {
			ops = append(ops, simOp{true, i})
		}
		for i := 0; i < m; i++ {
			ops = append(ops, simOp{false, i})
		}
		return ops
	}
	warm := min(S-s-1, m)
	for i := 0; i < warm; i++ {
		ops = append(ops, simOp{true, i})
	}
	for i := 0; i < m-warm; i++ {
		ops = append(ops, simOp{true, warm + i}, simOp{false, i})
	}
	for i := m - warm; i < m; i++ {
		ops = append(ops, simOp{false, i})
	}
	return ops
}

type simStage struct {
	node           int
	ops            []simOp
	next           int
	busy           bool
	act, grad      []bool
	times          stageTimes // pass times per sequence and offload I/O
	sendFree, back float64    // when the links to the next and previous stage are free
	// idleAt is when the stage's last send is serialised: the worker hands its outputs to
	// the transport inline and starts nothing before they are sent.
	idleAt float64
}

type replicaSim struct {
	in     *instance
	stages []simStage
	sizes  []int
	q      eventQueue
	seq    int
	end    float64
	loads  map[[2]int]float64
	r      replicaDraft
}

func (in *instance) simulateReplica(r replicaDraft, m int, loads map[[2]int]float64) (float64, int) {
	S, mr := len(r.nodes), r.micro(m)
	rs := &replicaSim{in: in, sizes: microSizes(r.batch, mr), loads: loads, r: r}
	for s, nd := range r.nodes {
		st := simStage{node: nd, ops: scheduleOps(in.sched, s, S, mr), act: make([]bool, mr), grad: make([]bool, mr)}
		st.times = in.stageTimes(nd, r.bounds[s], r.bounds[s+1], r.mode(s))
		if s == 0 {
			for i := range st.act {
				st.act[i] = true
			}
		}
		rs.stages = append(rs.stages, st)
	}
	for s := range rs.stages {
		rs.tryStart(s, 0)
	}
	events := 0
	for rs.q.Len() > 0 {
		ev := heap.Pop(&rs.q).(simEvent)
		events++
		rs.handle(ev)
	}
	return rs.end, events
}

func (rs *replicaSim) push(ev simEvent) {
	ev.seq = rs.seq
	rs.seq++
	heap.Push(&rs.q, ev)
}

// tryStart begins stage s's next pass if the node is idle and the pass's input is there.
func (rs *replicaSim) tryStart(s int, now float64) {
	st := &rs.stages[s]
	if st.busy || st.next == len(st.ops) {
		return
	}
	op := st.ops[st.next]
	if (op.forward && !st.act[op.mb]) || (!op.forward && !st.grad[op.mb]) {
		return
	}
	st.busy = true
	now = math.Max(now, st.idleAt)
	// A pass takes the longer of its compute (a recomputing stage's backward pass runs the
	// forward pass again) and its offload I/O.
	dur := st.times.backward(float64(rs.sizes[op.mb]))
	if op.forward {
		dur = st.times.forward(float64(rs.sizes[op.mb]))
	}
	rs.push(simEvent{t: now + dur, kind: evComputeDone, stage: s, mb: op.mb, forward: op.forward})
}

func (rs *replicaSim) handle(ev simEvent) {
	switch ev.kind {
	case evComputeDone:
		st := &rs.stages[ev.stage]
		st.busy = false
		st.next++
		rs.end = math.Max(rs.end, ev.t)
		if st.next == len(st.ops) { // the optimizer step reads and writes offloaded state
			rs.end = math.Max(rs.end, ev.t+st.times.optIO)
		}
		switch {
		case ev.forward && ev.stage == len(rs.stages)-1:
			st.grad[ev.mb] = true // the loss is computed where the forward pass ends
		case ev.forward:
			st.idleAt = rs.send(ev.stage, ev.stage+1, ev.mb, ev.t, evActivationArrives)
		case ev.stage > 0:
			st.idleAt = rs.send(ev.stage, ev.stage-1, ev.mb, ev.t, evGradientArrives)
		}
		rs.tryStart(ev.stage, ev.t)
	case evActivationArrives:
		rs.stages[ev.stage].act[ev.mb] = true
		rs.tryStart(ev.stage, ev.t)
	case evGradientArrives:
		rs.stages[ev.stage].grad[ev.mb] = true
		rs.tryStart(ev.stage, ev.t)
	}
}

// send puts micro-batch mb's activation (or gradient) from stage a to stage b on their
// directed link, which carries one message at a time in the order they were sent, and
// returns when the message is serialised (the sender is blocked until then).
func (rs *replicaSim) send(a, b, mb int, now float64, kind int) float64 {
	in := rs.in
	boundary := max(a, b) // the boundary sits before stage max(a, b)
	bytes := float64(rs.sizes[mb]) * in.tokens * in.out[rs.r.bounds[boundary]-1]
	from, to := rs.stages[a].node, rs.stages[b].node
	bw, lat := in.link(from, to)
	free := &rs.stages[a].sendFree
	if b < a {
		free = &rs.stages[a].back
	}
	start := math.Max(now, *free)
	*free = start + bytes/bw
	rs.loads[[2]int{from, to}] += bytes
	rs.push(simEvent{t: *free + lat, kind: kind, stage: b, mb: mb})
	return *free
}

// simulateSync plays the sync phase. Layers whose holders are the same nodes in every
// replica form one bucket; each bucket is a ring all-reduce of 2(R−1) rounds, in which every
// holder sends 1/R of the compressed payload to the next holder once it has received the
// previous round's chunk. Each directed link carries one chunk at a time, first ready first
// served, so buckets that share a link queue on it while disjoint rings proceed in parallel.
func (in *instance) simulateSync(d draft, loads map[[2]int]float64) float64 {
	R := len(d.replicas)
	if R < 2 {
		return 0
	}
	holders := in.holders(d)
	type bucket struct {
		ring  [][2]int
		chunk float64
	}
	var buckets []bucket
	for l := 0; l < in.L; {
		e := l + 1
		for e < in.L && sameHolders(holders, l, e) {
			e++
		}
		b := bucket{}
		for i := l; i < e; i++ {
			b.chunk += in.params[i] / in.compress / float64(R)
		}
		for r := 0; r < R; r++ {
			b.ring = append(b.ring, [2]int{holders[r][l], holders[(r+1)%R][l]})
		}
		buckets = append(buckets, b)
		l = e
	}
	// An event is chunk (bucket, round, ring position) becoming ready to send at t.
	var q eventQueue
	seq := 0
	push := func(t float64, b, round, pos int) {
		heap.Push(&q, simEvent{t: t, seq: seq, stage: b, kind: round, mb: pos})
		seq++
	}
	for b := range buckets {
		for pos := 0; pos < R; pos++ {
			push(0, b, 0, pos)
		}
	}
	free := map[[2]int]float64{}
	end := 0.0
	for q.Len() > 0 {
		ev := heap.Pop(&q).(simEvent)
		b := buckets[ev.stage]
		link := b.ring[ev.mb]
		bw, lat := in.link(link[0], link[1])
		start := math.Max(ev.t, free[link])
		free[link] = start + b.chunk/bw
		loads[link] += b.chunk / in.inner
		arrive := free[link] + lat
		end = math.Max(end, arrive)
		if ev.kind+1 < 2*(R-1) {
			push(arrive, ev.stage, ev.kind+1, (ev.mb+1)%R)
		}
	}
	return end
}

func sameHolders(h [][]int, a, b int) bool {
	for r := range h {
		if h[r][a] != h[r][b] {
			return false
		}
	}
	return true
}
