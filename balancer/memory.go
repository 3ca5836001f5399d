package balancer

import (
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Disk bandwidths assumed for a node whose profile measured none: a slow SATA disk or a
// network volume (a laptop SSD reads ~2 GB/s). Low on purpose: the planner then offloads
// only where nothing else fits, and never counts on a disk it has not seen.
const (
	DefaultDiskReadBps  = 100e6
	DefaultDiskWriteBps = 50e6
)

// zeroSlackPerLayer bounds the rounding of ZeRO's chunks: a member of a run of R holds
// ⌈n/R⌉ elements of each moment, at most one float32 more per moment than n/R, and a stage
// holds at most one run per layer.
const zeroSlackPerLayer = 8

// stageMode is how a stage runs its layers [j, e): whether it recomputes activations, how
// many bytes of its training state live on disk, and its resident peak memory.
type stageMode struct {
	recompute bool
	offload   float64
	mem       float64
	static    float64 // the stage's training state (stageStatic), resident or not
}

// stageStatic is the training state of layers [j, e) on one member of R replicas: weights,
// gradients and AdamW moments, the moments divided among the R members under ZeRO (1 or 2:
// the gradient accumulation buffer stays whole either way, see docs/memory.md).
func (in *instance) stageStatic(j, e, R int) float64 {
	st := in.static[e] - in.static[j]
	if j > 0 && e == in.L {
		st += in.tiedTable // a tied head's copy of the token table
	}
	if in.zero == 0 || R < 2 {
		return st
	}
	opt := in.opt[e] - in.opt[j]
	return st - opt + math.Min(opt, opt/float64(R)+zeroSlackPerLayer*float64(e-j))
}

// activations is the per-step memory of layers [j, e) beyond their training state, for
// inflight micro-batches of at most seqs sequences: the activations saved for backward per
// micro-batch in flight (recomputing: the recomputed layers' outputs, plus the largest
// layer's saved activations once), and a send and a receive buffer at each boundary.
func (in *instance) activations(j, e int, seqs, inflight float64, recompute bool) float64 {
	tok := seqs * in.tokens
	boundary := in.out[e-1]
	if j > 0 {
		boundary += in.out[j-1]
	}
	if recompute {
		return inflight*tok*(in.kept[e]-in.kept[j]) + tok*in.savedMax.of(j, e) + 2*tok*boundary
	}
	return inflight*tok*(in.saved[e]-in.saved[j]) + 2*tok*boundary
}

// stageMemory is the resident peak of layers [j, e) with R replicas in the mode a plan
// states: training state less what is offloaded, plus activations.
func (in *instance) stageMemory(j, e int, seqs, inflight float64, R int, recompute bool, offload float64) float64 {
	return in.stageStatic(j, e, R) - offload + in.activations(j, e, seqs, inflight, recompute)
}

// minResident is the least training state an offloading stage keeps in memory: its
// largest layer's weights, gradients and moments, which its backward pass and optimizer
// step touch together.
func (in *instance) minResident(j, e int) float64 { return in.staticMax.of(j, e) }

// chooseStage picks the cheapest way layers [j, e) fit budget bytes under the instance's
// allowances, in order of preference: as they are; recomputing (when allowed, or always
// when the job says on); recomputing where allowed and offloading the training state that
// does not fit beside the activations (when allowed, and only with one replica: the
// engine's offload store holds a pure pipeline's state; synchronising replicas keep
// full-size buffers), keeping at least minResident, and only where the node's disk has
// room for the store's file (the whole training state; Node.DiskFreeBytes). ok is false
// when none fits. budget is node nd's memory.
func (in *instance) chooseStage(nd int, j, e int, seqs, inflight float64, R int) (stageMode, bool) {
	budget := in.mem[nd]
	static := in.stageStatic(j, e, R)
	mode := stageMode{recompute: in.forceRecompute && in.stageRecomputes(j, e), static: static}
	act := in.activations(j, e, seqs, inflight, mode.recompute)
	if mode.mem = static + act; mode.mem <= budget {
		return mode, true
	}
	if !mode.recompute && in.allowRecompute && in.stageRecomputes(j, e) {
		mode.recompute = true
		act = in.activations(j, e, seqs, inflight, true)
		if mode.mem = static + act; mode.mem <= budget {
			return mode, true
		}
	}
	if in.allowOffload && R < 2 && static <= in.diskRoom[nd] {
		if resident := budget - act; resident >= math.Min(static, in.minResident(j, e)) {
			mode.offload, mode.mem = static-resident, budget
			return mode, true
		}
	}
	return stageMode{}, false
}

// stageRecomputes reports whether a stage of layers [j, e) has any layer to recompute.
func (in *instance) stageRecomputes(j, e int) bool {
	return in.kept[e] > in.kept[j] || in.savedMax.of(j, e) > 0
}

// offloadIO is the disk time of a stage of layers [j, e) on node nd that keeps mode.offload
// bytes of its training state on disk. The store is modelled as keeping the same fraction f
// of every kind of state on disk (weights w, gradients g, moments m: f of each) and
// reading it back whenever a pass needs it:
//
//	forward, per micro-batch:  read w
//	backward, per micro-batch: read w and g, write g (the accumulated gradient)
//	optimizer, once per step:  read w, g, m; write w, m
//
// Reads and writes share the disk (their times add). The forward and backward I/O overlap
// the pass's compute (a pass takes the longer of the two); the optimizer's does not.
func (in *instance) offloadIO(nd, j, e int, mode stageMode) (fwd, bwd, opt float64) {
	if mode.offload <= 0 || mode.static <= 0 {
		return 0, 0, 0
	}
	f := mode.offload / mode.static
	w, g := f*(in.pb[e]-in.pb[j]), f*(in.gb[e]-in.gb[j])
	m := f*mode.static - w - g
	rd, wr := in.diskRead[nd], in.diskWrite[nd]
	return w / rd, (w+g)/rd + g/wr, (w+g+m)/rd + (w+m)/wr
}

// stageTimes are the per-sequence pass times and the per-pass and per-step disk times of
// one stage under its mode.
type stageTimes struct {
	fwdPerSeq, bwdPerSeq float64 // at the node's large-micro-batch rate
	fwdIO, bwdIO, optIO  float64
	// microEff and tokens price a micro-batch's size (micro.go): the node's micro-batch
	// efficiency and the tokens per sequence.
	microEff, tokens float64
}

func (in *instance) stageTimes(nd, j, e int, mode stageMode) stageTimes {
	t := stageTimes{fwdPerSeq: in.tokens * (in.fwd[e] - in.fwd[j]) / in.speed[nd], microEff: in.microEff[nd], tokens: in.tokens}
	bwd := in.bwd[e] - in.bwd[j]
	if mode.recompute {
		bwd += in.fwdR[e] - in.fwdR[j]
	}
	t.bwdPerSeq = in.tokens * bwd / in.speed[nd]
	t.fwdIO, t.bwdIO, t.optIO = in.offloadIO(nd, j, e, mode)
	return t
}

// microBatch is the time of one forward and one backward pass over seqs sequences, each
// pass the longer of its compute and its disk I/O.
func (t stageTimes) microBatch(seqs float64) float64 {
	return t.forward(seqs) + t.backward(seqs)
}

// forward and backward are one pass over a micro-batch of seqs sequences: the longer of
// its compute, at the node's rate for that micro-batch size, and its disk I/O.
func (t stageTimes) forward(seqs float64) float64 {
	return max(seqs*t.fwdPerSeq*microSlowdown(t.microEff, seqs*t.tokens), t.fwdIO)
}

func (t stageTimes) backward(seqs float64) float64 {
	return max(seqs*t.bwdPerSeq*microSlowdown(t.microEff, seqs*t.tokens), t.bwdIO)
}

// replicaModes chooses every stage's mode of r for m micro-batches per step and R
// replicas, with the exact micro-batches in flight of each stage; it fails with the
// activation-memory error of the first stage that does not fit.
func (in *instance) replicaModes(r replicaDraft, m, R int) ([]stageMode, error) {
	modes, bad := in.tryModes(r, m, R, nil)
	if bad < 0 {
		return modes, nil
	}
	mr := r.micro(m)
	return nil, in.stageError(r, bad, math.Ceil(float64(r.batch)/float64(mr)), float64(inflight(in.sched, mr, len(r.nodes), bad)), R)
}

// tryModes is replicaModes without the error, into buf when it has room: bad is the
// first stage that fits no allowed mode, or −1.
func (in *instance) tryModes(r replicaDraft, m, R int, buf []stageMode) (modes []stageMode, bad int) {
	S, mr := len(r.nodes), r.micro(m)
	maxSeqs := math.Ceil(float64(r.batch) / float64(mr))
	modes = buf[:0]
	if cap(buf) < S {
		modes = make([]stageMode, 0, S)
	}
	modes = modes[:S]
	for s, nd := range r.nodes {
		mode, ok := in.chooseStage(nd, r.bounds[s], r.bounds[s+1], maxSeqs, float64(inflight(in.sched, mr, S, s)), R)
		if !ok {
			return nil, s
		}
		modes[s] = mode
	}
	return modes, -1
}

// stageError explains a stage that does not fit in any allowed mode.
func (in *instance) stageError(r replicaDraft, s int, maxSeqs, infl float64, R int) error {
	nd, j, e := r.nodes[s], r.bounds[s], r.bounds[s+1]
	need := in.minNeed(j, e, maxSeqs, infl, R)
	return infeasible("activation-memory", need, in.mem[nd],
		"node %s: layers [%d,%d) with %g micro-batches of %g sequences in flight need %s but its budget is %s (short by %s)",
		in.ids[nd], j, e, infl, maxSeqs, gib(need), gib(in.mem[nd]), gib(need-in.mem[nd]))
}

// withModes returns d with every replica's stage modes chosen (replicaModes).
func (in *instance) withModes(d draft) (draft, error) {
	reps := make([]replicaDraft, len(d.replicas))
	for i, r := range d.replicas {
		modes, err := in.replicaModes(r, d.m, len(d.replicas))
		if err != nil {
			return d, err
		}
		r.modes = modes
		reps[i] = r
	}
	d.replicas = reps
	return d, nil
}

// zeroFor is the ZeRO stage a plan of R replicas runs with: the job's in sync mode with
// at least two replicas, else 0.
func (in *instance) zeroFor(R int) int {
	if R < 2 {
		return 0
	}
	return in.zero
}

// allowances of one planning pass: which memory techniques chooseStage may use.
type allowances struct{ recompute, offload bool }

// tiers lists the allowances NewPlan tries in order: first without anything the job leaves
// to auto, then with recomputation, then with offload, so a plan without them is preferred
// whatever its speed. "on" allows a technique from the first tier (recompute on: every
// stage recomputes; offload on: any stage may offload, its I/O priced against the rest).
func tiers(job Job) []allowances {
	t := allowances{offload: job.Offload == jobspec.OffloadOn}
	out := []allowances{t}
	if job.Recompute == jobspec.RecomputeAuto {
		t.recompute = true
		out = append(out, t)
	}
	if job.Offload == jobspec.OffloadAuto {
		t.offload = true
		out = append(out, t)
	}
	return out
}

// minNeed is the least memory layers [j, e) need in any mode the instance allows: with
// offload, the activations (recomputed where allowed) and the smallest resident share of
// the training state; else the whole training state and the activations. It grows with
// the range, so searches may prune on it.
func (in *instance) minNeed(j, e int, seqs, inflight float64, R int) float64 {
	rc := (in.allowRecompute || in.forceRecompute) && in.stageRecomputes(j, e)
	if in.allowOffload {
		return in.activations(j, e, seqs, inflight, rc) + math.Min(in.stageStatic(j, e, R), in.minResident(j, e))
	}
	return in.stageMemory(j, e, seqs, inflight, R, rc, 0)
}

// maxReplicas is the most replicas any plan can have, for lower bounds under ZeRO.
func (in *instance) maxReplicas() int {
	if in.zero == 0 {
		return 1
	}
	return max(1, min(in.n, in.job.Batch))
}
