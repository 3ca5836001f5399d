package parallel

import (
	"context"
	"fmt"
	"strconv"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
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
}

// newZeroShard cuts the run's parameters ps (in flat order) into the chunk a member of a
// group of R at position self owns, and allocates its moments.
func newZeroShard(ps []*model.Param, self, R int) *zeroShard {
	n := countParams(ps)
	c := mod(self+1, R)
	z := &zeroShard{chunk: c, lo: n * c / R, hi: n * (c + 1) / R}
	z.m, z.v = make([]float32, z.hi-z.lo), make([]float32, z.hi-z.lo)
	start := 0
	for _, p := range ps {
		a, b := max(start, z.lo), min(start+p.Value.Size(), z.hi)
		if a < b {
			z.segs = append(z.segs, zeroSeg{p: p, off: a - start, n: b - a, at: a - z.lo})
		}
		start += p.Value.Size()
	}
	return z
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
	return false, timed(&s.w.times.Sync, func() error { return s.zeroStep(ctx, lr) })
}

// snapshot replaces the optimizer tensors with this member's pieces of the moments.
func (s *zeroSync) snapshot(st *StageState) { st.Optimizer, st.OptimizerMeta = s.zeroState() }

// zeroStep is a sync step under ZeRO: per run, reduce-scatter the weighted gradients (each
// member keeps the mean of its chunk), the global norm from every shard's Σg² summed over
// the run's replicas and then the stage's pipeline, each member's AdamW on its chunk, and
// an all-gather of the updated parameters. The ring is the one allReduceMean uses, so each
// chunk is summed in the same order as without ZeRO.
func (s *zeroSync) zeroStep(ctx context.Context, lr float64) error {
	w := s.w
	var local float64
	for i, run := range w.runs {
		z := s.shards[i]
		g := flattenGrads(w.runParams[i])
		w.weigh(g)
		if err := ringReduceScatter(ctx, countingTransport{w}, run.group, w.roundKey(run.first), g); err != nil {
			return fmt.Errorf("step %d gradient reduce-scatter of layers [%d, %d): %w", w.step+1, run.first, run.last, err)
		}
		inv := 1 / float32(len(run.group.Members))
		z.grad = g[z.lo:z.hi:z.hi]
		if w.cfg.Sync.Zero >= 2 {
			z.grad = append([]float32(nil), z.grad...) // only the shard outlives the sync buffer
		}
		for j := range z.grad {
			z.grad[j] *= inv
		}
		sums, err := allGatherScalars(ctx, w.tr, run.group, w.roundKey(zeroNormIndex+run.first), z.sumSquares())
		if err != nil {
			return fmt.Errorf("step %d gradient norm of layers [%d, %d): %w", w.step+1, run.first, run.last, err)
		}
		for _, s := range sums {
			local += s
		}
	}
	norms, err := allGatherScalars(ctx, w.tr, w.stageGroup, w.roundKey(normIndex), local)
	if err != nil {
		return fmt.Errorf("step %d gradient norm: %w", w.step+1, err)
	}
	var total float64
	for _, n := range norms {
		total += n
	}
	c := float32(1)
	if w.cfg.Train.ClipNorm > 0 {
		c = kernels.ClipCoefficient(total, w.cfg.Train.ClipNorm)
	}
	s.steps++
	h := w.cfg.Train.adamW()
	h.LR = lr
	for i, run := range w.runs {
		z := s.shards[i]
		z.update(h, c, s.steps)
		z.grad = nil
		if err := w.gatherParams(ctx, run, i); err != nil {
			return err
		}
	}
	return nil
}

// gatherParams all-gathers run i's parameters after every member updated its chunk.
func (w *Worker) gatherParams(ctx context.Context, run syncRun, i int) error {
	ps := w.runParams[i]
	x := make([]float32, 0, countParams(ps))
	for _, p := range ps {
		x = append(x, p.Value.Data...)
	}
	if err := ringAllGather(ctx, countingTransport{w}, run.group, w.roundKey(run.first), x); err != nil {
		return fmt.Errorf("step %d parameter all-gather of layers [%d, %d): %w", w.step+1, run.first, run.last, err)
	}
	for _, p := range ps {
		x = x[copy(p.Value.Data, x):]
	}
	return nil
}

// zeroNormIndex is the base of the frame indexes of the per-run shard norms (plus the
// run's first layer).
const zeroNormIndex = 0xf000

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
	if opt.Steps != step {
		return fmt.Errorf("restore: optimizer state is at step %d, the checkpoint at %d", opt.Steps, step)
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
