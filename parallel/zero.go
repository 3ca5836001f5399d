package parallel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// zeroSeg is the part of one parameter that falls in a shard: Value.Data[off:off+n] is
// the shard's elements [at, at+n).
type zeroSeg struct {
	p          *model.Param
	off, n, at int
}

// zeroShard is a worker's share of one run under ZeRO: the chunk of the run's flat vector
// that the ring reduce-scatter leaves reduced at this member (chunk Self+1 of R), with the
// AdamW moments of that chunk only, and under ZeRO-2 the reduced gradient of that chunk.
type zeroShard struct {
	chunk, lo, hi int
	segs          []zeroSeg
	m, v          []float32
	grad          []float32 // the reduced gradient of the chunk, between sync and update
	members       int       // R, the run's replicas
	// full is the whole run's aggregate when this step gathered the contributions (the
	// checked path), nil after the ring's reduce-scatter: from it a member updates the
	// chunk of an owner whose parameters it refused (adopt).
	full []float32
	// adopted holds, per chunk of an owner whose parameters this member refused, the
	// AdamW moments it keeps for that chunk from then on.
	adopted map[int]*adoptedChunk
	// checked: a parameter chunk was refused, so every later step gathers the
	// contributions whole (reduceShard; the full aggregate is then at hand for adoption).
	checked bool
	ps      []*model.Param // the run's parameters, in flat order
}

// adoptedChunk is the optimizer state of another owner's chunk that this member updates
// itself: AdamW's moments from zero at the first refusal, and the updates applied since.
type adoptedChunk struct {
	m, v  []float32
	segs  []zeroSeg
	steps int
}

// newZeroShard cuts the run's parameters ps (in flat order) into the chunk a member of a
// group of R at position self owns, and allocates its moments.
func newZeroShard(ps []*model.Param, self, R int) *zeroShard {
	n := countParams(ps)
	c := mod(self+1, R)
	z := &zeroShard{chunk: c, lo: n * c / R, hi: n * (c + 1) / R, members: R, ps: ps}
	z.m, z.v = make([]float32, z.hi-z.lo), make([]float32, z.hi-z.lo)
	z.segs = chunkSegs(ps, z.lo, z.hi)
	return z
}

// chunkSegs cuts the flat elements [lo, hi) of ps into the parts of each parameter.
func chunkSegs(ps []*model.Param, lo, hi int) []zeroSeg {
	var segs []zeroSeg
	start := 0
	for _, p := range ps {
		a, b := max(start, lo), min(start+p.Value.Size(), hi)
		if a < b {
			segs = append(segs, zeroSeg{p: p, off: a - start, n: b - a, at: a - lo})
		}
		start += p.Value.Size()
	}
	return segs
}

// sumSquares is Σ g² over the shard's reduced gradient.
func (z *zeroShard) sumSquares() float64 { return kernels.SumSquares(z.grad) }

// update clips the shard's gradient by c (< 1 clips) and applies AdamW to the shard's
// parameters, weight decay per parameter as Optimizer.Step does.
func (z *zeroShard) update(h kernels.AdamW, c float32, step int) {
	if c < 1 {
		kernels.Scale(z.grad, c)
	}
	for _, s := range z.segs {
		e := s.at + s.n
		h.Step(s.p.Value.Data[s.off:s.off+s.n], z.grad[s.at:e], z.m[s.at:e], z.v[s.at:e], step, s.p.Decay)
	}
}

// zeroSync is ZeRO 1 and 2 (Rajbhandari et al. 2020) in sync mode: per run, the
// replicas reduce-scatter the gradients, each updates the chunk it owns with the AdamW
// moments of that chunk only, and they all-gather the parameters. ZeRO-2 also keeps only
// its chunk of the reduced gradient. It replaces every-step averaging and the whole
// optimizer: the training state holds no moments.
type zeroSync struct {
	baseSync
	shards []*zeroShard // per run
	steps  int          // AdamW updates applied
	bound  supBound     // sup of AdamW's update bound over the steps so far (paramLimit)
}

func newZeroSync(b baseSync) *zeroSync {
	s := &zeroSync{baseSync: b}
	for i, run := range b.w.runs {
		s.shards = append(s.shards, newZeroShard(b.w.runParams[i], run.group.Self, len(run.group.Members)))
	}
	return s
}

// MomentElements is the number of AdamW moment elements (m and v together) the worker holds:
// 2·n for n parameters unsharded, 2·(its shards) under ZeRO.
func (w *Worker) MomentElements() int { return w.sync.momentElements() }

func (s *zeroSync) momentElements() int {
	n := 0
	for _, z := range s.shards {
		n += len(z.m) + len(z.v)
	}
	return n
}

// update is the sharded step, zeroStep.
func (s *zeroSync) update(ctx context.Context, lr float64) (bool, error) {
	var skipped bool
	err := timed(&s.w.times.Sync, func() (err error) {
		skipped, err = s.zeroStep(ctx, lr)
		return err
	})
	return skipped, err
}

// snapshot replaces the optimizer tensors with this member's pieces of the moments.
func (s *zeroSync) snapshot(st *StageState) { st.Optimizer, st.OptimizerMeta = s.zeroState() }

// zeroStep is a sync step under ZeRO: per run, the checked reduce-scatter of the weighted
// gradients (each member keeps the mean of its chunk, reduceShard), the global norm from
// every shard's Σg² summed over the run's replicas and then the stage's pipeline, each
// member's AdamW on its chunk, and an all-gather of the updated parameters. A step whose
// global norm is not finite is skipped on every member, as without ZeRO.
func (s *zeroSync) zeroStep(ctx context.Context, lr float64) (bool, error) {
	w := s.w
	if err := w.mirrorStages(ctx); err != nil {
		return false, err
	}
	var local float64
	for i, run := range w.runs {
		sum, err := s.reduceShard(ctx, i, run)
		if err != nil {
			return false, err
		}
		local += sum
	}
	norms, err := allGatherScalars(ctx, w.tr, w.stageGroup, w.roundKey(normIndex), local)
	if err != nil {
		return false, fmt.Errorf("step %d gradient norm: %w", w.step+1, err)
	}
	var total float64
	for _, n := range norms {
		total += n
	}
	if math.IsNaN(total) || math.IsInf(total, 0) {
		for _, z := range s.shards {
			z.grad = nil
		}
		return true, nil // every member gathered the same total: all skip
	}
	c := float32(1)
	if w.cfg.Train.ClipNorm > 0 {
		c = kernels.ClipCoefficient(total, w.cfg.Train.ClipNorm)
	}
	s.steps++
	h := w.cfg.Train.adamW()
	h.LR = lr
	lim := paramLimit{lr: lr, wd: math.Abs(h.WeightDecay), b: s.bound.upTo(h, s.steps)}
	for i, run := range w.runs {
		z := s.shards[i]
		before := w.paramsBefore(i)
		z.update(h, c, s.steps)
		z.grad = nil
		err := w.gatherParams(ctx, run, i, lim, before, func(chunk int, dst []float32) { z.adopt(h, c, chunk, dst) })
		z.full = nil
		if err != nil {
			return false, err
		}
	}
	return false, nil
}

// adopt updates dst, the parameters of chunk (of the run's flat vector) whose owner sent
// a chunk this member refused, as the owner should have: AdamW on the step's aggregate
// (clipped by c) with moments this member keeps for the chunk from then on. Every honest
// member refuses the same chunk and holds the same aggregate, so all adopt it alike and
// keep the same bits. Without the aggregate (the ring's reduce-scatter ran: this member
// holds only its own chunk's sum) the chunk stays as it was for this step; later steps
// gather the contributions whole (checked).
func (z *zeroShard) adopt(h kernels.AdamW, c float32, chunk int, dst []float32) {
	z.checked = true
	if z.full == nil {
		return
	}
	if z.adopted == nil {
		z.adopted = map[int]*adoptedChunk{}
	}
	a := z.adopted[chunk]
	if a == nil {
		n, R := len(z.full), z.members
		a = &adoptedChunk{m: make([]float32, len(dst)), v: make([]float32, len(dst)),
			segs: chunkSegs(z.ps, n*chunk/R, n*(chunk+1)/R)}
		z.adopted[chunk] = a
	}
	g := slices.Clone(chunkOf(z.full, chunk, z.members))
	if c < 1 {
		kernels.Scale(g, c)
	}
	a.steps++
	// Weight decay per parameter, as the owner applies it.
	for _, sg := range a.segs {
		e := sg.at + sg.n
		h.Step(dst[sg.at:e], g[sg.at:e], a.m[sg.at:e], a.v[sg.at:e], a.steps, sg.p.Decay)
	}
}

// reduceShard leaves in run i's shard the aggregate of the replicas' weighted gradients
// for its chunk and returns Σg² of the whole aggregate. It is the checked path of
// allReduceMean cut after the reduce-scatter: with the plain mean every member sends each
// chunk straight to its owner (directReduceScatter: the ring's bytes and bits, and no
// member relays another's partial sum) while the contributions' norms travel beside it,
// and Σg² is summed from every member's chunk;
// when the aggregate's norm is not admissible beside them (a NaN, an outsized
// contribution, a member that adopts a refused chunk and says so with a NaN Σg², an owner
// whose chunk's contributions pull apart under score: auto and says so the same way), or
// the collective looks inconsistent where score: auto scores such collectives (suspect), or
// the rule is robust, or contributions are scored, every member gathers the contributions
// whole, drops what is not admissible and aggregates the rest (gatherAggregate), keeps
// its chunk and the whole aggregate (for adopt) and takes Σg² from it.
func (s *zeroSync) reduceShard(ctx context.Context, i int, run syncRun) (float64, error) {
	w, z := s.w, s.shards[i]
	pol := s.gatherPolicy(i) // signed against the run's weights: evidence a leader re-judges
	g := flattenGrads(w.runParams[i])
	w.weigh(g)
	tr, R := countingTransport{w}, len(run.group.Members)
	own := slices.Clone(g)
	k := w.roundKey(run.first)
	fail := func(what string, err error) (float64, error) {
		return 0, fmt.Errorf("step %d gradient %s of layers [%d, %d): %w", w.step+1, what, run.first, run.last, err)
	}
	if !pol.robust() && pol.score == nil {
		ownNorm := norm2(own)
		if err := sendScalar(ctx, w.tr, run.group, w.roundKey(zeroContribIndex+run.first), ownNorm); err != nil {
			return fail("contribution norms", err)
		}
		parts, err := directReduceScatter(ctx, tr, run.group, k, g)
		if err != nil {
			return fail("reduce-scatter", err)
		}
		s.keepShard(z, g, 1/float32(R))
		mine := z.sumSquares()
		if z.checked || (pol.scoreContested != nil && pullApart(parts)) {
			// This member adopts a refused owner's chunk and needs the whole aggregate, or
			// (score: auto) the contributions to its chunk pull apart (pullApart, on what
			// their members sent rather than on the norms they claim): a non-finite Σg²
			// makes every member fall back to the checked gather below.
			mine = math.NaN()
		}
		sums, err := allGatherScalars(ctx, w.tr, run.group, w.roundKey(zeroNormIndex+run.first), mine)
		if err != nil {
			return fail("norm", err)
		}
		norms, err := recvScalars(ctx, w.tr, run.group, w.roundKey(zeroContribIndex+run.first), ownNorm)
		if err != nil {
			return fail("contribution norms", err)
		}
		var sum float64
		for _, v := range sums {
			sum += v
		}
		if admissible(math.Sqrt(sum), refNorm(norms)) == "" && (pol.scoreContested == nil || !suspect(norms, float64(R*R)*sum)) &&
			(!pol.equalise || !spreadPerSequence(norms, pol.perSequence(run.group.Members), EqualiseSpread)) {
			return sum, nil
		}
	}
	copy(g, own)
	if err := gatherAggregate(ctx, tr, run.group, k, 2*R, g, nil, pol); err != nil {
		return fail("gather", err)
	}
	s.keepShard(z, g, 1)
	z.full = g
	// Every member holds the whole aggregate: its Σg² needs no member's word for it, nor
	// a round trip.
	return kernels.SumSquares(g), nil
}

// keepShard keeps z's chunk of the reduced vector g, scaled by inv (under ZeRO-2 a copy:
// only the shard outlives the sync buffer).
func (s *zeroSync) keepShard(z *zeroShard, g []float32, inv float32) {
	z.grad = g[z.lo:z.hi:z.hi]
	if s.w.cfg.Sync.Zero >= 2 {
		z.grad = append([]float32(nil), z.grad...)
	}
	if inv != 1 {
		for j := range z.grad {
			z.grad[j] *= inv
		}
	}
}

// gatherParams all-gathers run i's parameters after every member updated its chunk. Each
// member sends its chunk directly to every other (the bytes of the ring's all-gather, with
// no relay that could alter another's chunk), and a chunk is taken only when it moves no
// parameter further than one honest AdamW step can (lim); a member refuses any other,
// reports its owner and updates the chunk itself (adopt).
func (w *Worker) gatherParams(ctx context.Context, run syncRun, i int, lim paramLimit, before *paramsBefore, adopt func(chunk int, dst []float32)) error {
	ps, g := w.runParams[i], run.group
	R, me := len(g.Members), g.Self
	x := make([]float32, 0, countParams(ps))
	for _, p := range ps {
		x = append(x, p.Value.Data...)
	}
	k, base := w.roundKey(run.first), 5*R // past the checked gather's rounds and its digests
	fail := func(err error) error {
		return fmt.Errorf("step %d parameter all-gather of layers [%d, %d): %w", w.step+1, run.first, run.last, err)
	}
	mine := chunkOf(x, mod(me+1, R), R)
	out, err := before.sign(k.slot(base+me, frame.CodecNone, len(mine)), appendF32(nil, mine))
	if err != nil {
		return fail(err)
	}
	for m := range R {
		if m != me {
			f := k.frame(frame.KindReduce, base+me, frame.CodecNone, len(mine), out)
			if err := sendPieces(ctx, countingTransport{w}, g.Members[m], f); err != nil {
				return fail(err)
			}
		}
	}
	pol := w.policy()
	refused := make([][]byte, R) // the signed chunks refused by the limit, kept as evidence
	for m := range R {
		if m == me {
			continue
		}
		dst := chunkOf(x, mod(m+1, R), R)
		f, err := recvPieces(ctx, w.tr, g.Members[m], k.frameKey(frame.KindReduce, base+m), 4*len(dst)+before.trailer())
		if err != nil && !errors.Is(err, errPieces) {
			return fail(fmt.Errorf("from %s: %w", g.Members[m], err))
		}
		in := make([]float32, len(dst))
		payload := []byte(nil)
		if err == nil {
			payload, err = before.open(f.Payload, 4*len(dst))
		}
		if err == nil {
			err = decodeF32(in, payload)
		}
		if err != nil {
			misbehaved(w.tr, g.Members[m], fmt.Sprintf("parameter chunk undecodable: %v", err))
			pol.report(g.Members[m], "parameter chunk undecodable: %v", err)
			adopt(mod(m+1, R), dst)
			continue
		}
		if err := before.verify(g.Members[m], k.slot(base+m, frame.CodecNone, len(dst)), f.Payload); err != nil {
			pol.report(g.Members[m], "parameter chunk %v", err)
			adopt(mod(m+1, R), dst)
			continue
		}
		if reason := lim.reason(in, dst); reason != "" {
			pol.report(g.Members[m], "parameter chunk %s", reason)
			refused[m] = f.Payload
			adopt(mod(m+1, R), dst)
			continue
		}
		copy(dst, in)
	}
	w.keepParamEvidence(k, base, g, ps, before, out, refused)
	for _, p := range ps {
		x = x[copy(p.Value.Data, x):]
	}
	return nil
}

// paramLimit is how far one AdamW step of an honest owner can move a parameter θ of its
// chunk: lr·(B + wd·|θ|), where B bounds every coordinate of Adam's update m̂/(√v̂+ε) for
// any gradients whatever (kernels.AdamW.UpdateBound: 1 at the first step, ≈ 1.165 later
// at β = (0.9, 0.95)) and wd·|θ| is the decoupled weight decay (every parameter is allowed
// it, decayed or not: at most a tenth of |θ|·lr more). A chunk scaled ×0.75 moves each
// weight by |θ|/4, past lr·1.17 wherever |θ| > 0.01 at lr 2e-3: realistic weights (std
// 0.02) cannot be shrunk by a quarter, or a tenth, unseen. What an owner can still do
// unseen is what an honest step can: move each parameter by up to lr·B, in any direction.
type paramLimit struct {
	lr, wd float64
	// b is B at the owner's step t, taken as sup_{τ≤t} B(τ) (supBound): every member
	// counts the same t (a step is skipped on all members or none, from the norm they
	// all gathered, and a restore takes t from the checkpoint every member restores,
	// whose moments are at that step), and a member whose count ran ahead of an owner's
	// still allows it every smaller step's bound. Where β1² ≥ β2, B grows with t without
	// limit, and so does the bound; with no bound (β outside its range) only finiteness
	// is checked.
	b float64
}

// paramStepSlack and paramStepULPs are the float32 rounding an honest step may add to
// lr·(B + wd·|θ|): the update m̂/(√v̂+ε) rounded in float32 (the worst gradient sequence,
// which reaches B exactly, moved 1 + 6e-7 of the bound where θ's own rounding is
// negligible, TestParamLimitHoldsForHonestAdamW), and p·(1 − lr·wd) − step rounded to θ's
// float32 grid (up to 1.5 units in the last place of |θ|: at lr 1e-7 and |θ| = 1 more
// than the step itself). A relative 1e-3 and 4 ulps of max(|θ_old|, |θ_new|) cover both:
// no honest step of that test used over 21% of the slack; neither lets a chunk of
// weights of std 0.02 shrink by even 3% (TestParamLimitRefusesShrunkChunks).
const (
	paramStepSlack = 1e-3
	paramStepULPs  = 4
)

// reason says why the updated chunk next may not replace old, or "" when it may.
func (l paramLimit) reason(next, old []float32) string {
	for j, v := range next {
		f, o := float64(v), float64(old[j])
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "not finite"
		}
		// The bare bound first: the rounding slack (a Frexp) only for a move past it.
		if d := math.Abs(f - o); d > l.lr*(l.b+l.wd*math.Abs(o))*(1+paramStepSlack) && d > l.max(o, f) {
			return fmt.Sprintf("moves a parameter from %.4g by %.3g, over lr·(B + wd·|θ|) = %.3g (lr %.3g, B %.4f)", o, f-o, l.lr*(l.b+l.wd*math.Abs(o)), l.lr, l.b)
		}
	}
	return ""
}

// max is the most an honest step moves a parameter from o to f: lr·(B + wd·|o|) and the
// rounding slack.
func (l paramLimit) max(o, f float64) float64 {
	return l.lr*(l.b+l.wd*math.Abs(o))*(1+paramStepSlack) + paramStepULPs*ulp32(max(math.Abs(o), math.Abs(f)))
}

// ulp32 is the spacing of float32 values at x ≥ 0 (finite even at math.MaxFloat32, so
// the slack never admits everything).
func ulp32(x float64) float64 {
	_, e := math.Frexp(x) // x = m·2^e, m in [0.5, 1)
	return math.Ldexp(1, max(e-24, -149))
}

// supBound keeps sup_{τ≤t} kernels.AdamW.UpdateBound(τ) as t advances one step at a time:
// O(1) a step, and O(t) once after a restore (0.2 µs a step, kernels BenchmarkUpdateBound
// at load 14: 0.2 s at t = 10⁶; a restore that lowers t starts it again).
type supBound struct {
	t   int
	sup float64
}

// upTo is sup_{τ≤t} h.UpdateBound(τ).
func (b *supBound) upTo(h kernels.AdamW, t int) float64 {
	if t < b.t {
		*b = supBound{}
	}
	for b.t < t {
		b.t++
		b.sup = max(b.sup, h.UpdateBound(b.t))
	}
	return b.sup
}

// zeroNormIndex is the base of the frame indexes of the per-run shard norms (plus the
// run's first layer).
const zeroNormIndex = 0xf000

// zeroContribIndex is the base of the frame indexes of the contributions' norms (plus
// the run's first layer).
const zeroContribIndex = 0xe000

// zeroPieceSuffix marks a piece of a moment in a checkpoint: "<param>.exp_avg.zero<off>"
// holds elements [off, off+len) of the parameter's flat moment. A ZeRO snapshot holds the
// pieces of its chunk; the files of every replica together hold every moment whole, and
// any sharding (or none) restores from them.
const zeroPieceSuffix = ".zero"

// zeroState is the optimizer part of a snapshot under ZeRO: this member's pieces of the
// moments and the step count.
func (s *zeroSync) zeroState() (map[string]*kernels.Tensor, map[string]string) {
	out := map[string]*kernels.Tensor{}
	for _, z := range s.shards {
		for _, g := range z.segs {
			for name, buf := range map[string][]float32{".exp_avg": z.m, ".exp_avg_sq": z.v} {
				t := kernels.NewTensor(g.n)
				copy(t.Data, buf[g.at:g.at+g.n])
				out[fmt.Sprintf("%s%s%s%d", g.p.Name, name, zeroPieceSuffix, g.off)] = t
			}
		}
	}
	return out, map[string]string{"step": strconv.Itoa(s.steps)}
}

// assembleMoments returns moments with every parameter's moments whole, joined from the
// pieces ZeRO snapshots write where the whole tensor is absent. A moment whose pieces do
// not cover it stays absent (Optimizer.Restore then names it).
func assembleMoments(moments *model.TensorFile, ps []*model.Param) *model.TensorFile {
	out := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}, Metadata: moments.Metadata}
	for k, t := range moments.Tensors {
		out.Tensors[k] = t
	}
	for _, p := range ps {
		for _, suffix := range []string{".exp_avg", ".exp_avg_sq"} {
			name := p.Name + suffix
			if _, ok := out.Tensors[name]; ok {
				continue
			}
			// The size from the shape: an offloaded parameter's Data is bound only while resident.
			size := kernels.ShapeSize(p.Value.Shape)
			whole, covered := kernels.NewTensor(p.Value.Shape...), 0
			for off := 0; off < size; {
				piece, ok := moments.Tensors[name+zeroPieceSuffix+strconv.Itoa(off)]
				if !ok || len(piece.Data) == 0 || off+len(piece.Data) > len(whole.Data) {
					break
				}
				off += copy(whole.Data[off:], piece.Data)
				covered = off
			}
			if covered == size {
				out.Tensors[name] = whole
			}
		}
	}
	return out
}

// restore restores weights and this member's chunks of the moments from a checkpoint
// of any sharding: whole moments, or the pieces of every replica's ZeRO snapshot. Nothing
// changes unless every moment is there.
func (s *zeroSync) restore(weights, moments *model.TensorFile, step int) error {
	w := s.w
	opt := NewOptimizer(w.params, w.cfg.Train.adamW(), w.cfg.Train.ClipNorm)
	if err := opt.Restore(assembleMoments(moments, w.params)); err != nil {
		return fmt.Errorf("restore optimizer: %w", err)
	}
	if err := checkUpdates(opt.Steps, step); err != nil {
		return err
	}
	if err := model.LoadParams(weights, w.params); err != nil {
		return fmt.Errorf("restore weights: %w", err)
	}
	for _, z := range s.shards {
		for _, g := range z.segs {
			copy(z.m[g.at:g.at+g.n], opt.m[g.p.Name].Data[g.off:g.off+g.n])
			copy(z.v[g.at:g.at+g.n], opt.v[g.p.Name].Data[g.off:g.off+g.n])
		}
	}
	s.steps = opt.Steps
	return nil
}

// engineNames spell the sync settings in the engine's errors (SyncConfig's fields, as
// the train command's flags name them).
var engineNames = jobspec.Names{Zero: "zero", Sync: "sync", Codec: "codec", Fragments: "fragments",
	InnerSteps: "inner-steps", Layers: "the model's blocks", Is: " "}

// checkZero validates Zero by the job spec's rule (an empty codec is none).
func (c SyncConfig) checkZero() error {
	codec := c.Codec
	if codec == "" {
		codec = jobspec.CodecNone
	}
	return jobspec.CheckZero(c.Zero, c.Mode, codec, engineNames)
}
