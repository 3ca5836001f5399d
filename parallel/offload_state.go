package parallel

import (
	"fmt"
	"os"
	"strconv"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// offloadState is a layer list's training state (weights, gradients, AdamW moments) in a
// chunk store under a memory budget. Its parameters and moments are shells whose Data the
// store binds to resident chunks while they are pinned; the layers it returns pin their
// chunks around each pass, following the schedule of a step: the passes in the order the
// step runs them (a Trainer's forward then backward per micro-batch, a pipeline stage's
// 1F1B or GPipe order), each forward through the layers and each backward in reverse,
// then the optimizer chunk by chunk.
type offloadState struct {
	store  *offload.Store
	lay    offload.Layout
	params []*model.Param
	opt    *Optimizer
	L, M   int
	// fwdPass[m] and bwdPass[m] are the positions of micro-batch m's forward and backward
	// passes in the step's pass order; pass p's layer ops are p·L … p·L + L − 1.
	fwdPass, bwdPass []int
	// first[l] is the index in params of layer l's first parameter.
	first []int
	// chunkParams[k] are the params (indices) in chunk k of every kind.
	chunkParams [][]int
	// sumSq[i] is Σg² of param i after the step's last backward pass of its layer.
	sumSq []float64
	// inStep and micro: a scheduled step is under way, at micro-batch micro.
	inStep bool
	micro  int
}

// offloadedLayer is a layer whose weights (and, backward, gradients) are pinned in the
// chunk store while it runs.
type offloadedLayer struct {
	model.Layer
	st    *offloadState
	index int
}

// Unwrap returns the wrapped layer (model.ScratchPeakBytes finds recomputed layers).
func (l *offloadedLayer) Unwrap() model.Layer { return l.Layer }

func (l *offloadedLayer) Forward(ws *model.Workspace, mb *model.Batch, x []float32) ([]float32, model.Saved) {
	st := l.st
	if !st.inStep { // evaluation: the weights only, outside the schedule
		cs := st.ids(offload.Value, st.lay.LayerChunks[l.index])
		st.store.Pin(cs, nil)
		defer st.store.Unpin(cs)
		return l.Layer.Forward(ws, mb, x)
	}
	op := st.fwdPass[st.micro]*st.L + l.index
	st.store.Enter(op)
	defer st.store.Exit(op)
	return l.Layer.Forward(ws, mb, x)
}

func (l *offloadedLayer) Backward(ws *model.Workspace, mb *model.Batch, saved model.Saved, dy []float32) []float32 {
	st := l.st
	op := st.bwdPass[st.micro]*st.L + (st.L - 1 - l.index)
	st.store.Enter(op)
	defer st.store.Exit(op)
	dx := l.Layer.Backward(ws, mb, saved, dy)
	if st.micro == st.M-1 { // the layer's gradients are final: their part of the norm
		for i := st.first[l.index]; i < st.first[l.index+1]; i++ {
			st.sumSq[i] = kernels.SumSquares(st.params[i].Grad.Data)
		}
	}
	return dx
}

// newOffloadState lays out the training state of layers (shells, layers first, first+1, …
// of the model) for cfg.MemoryBudget bytes, opens its store in cfg.OffloadDir with the
// schedule of a step that runs passes (every micro-batch's forward and backward once,
// backward passes in micro-batch order), and initialises the weights as model.InitLayer
// does.
func newOffloadState(cfg TrainConfig, shells []model.Layer, first int, passes []op) (*offloadState, error) {
	if cfg.Model.TiedHead() {
		// The head reads the embedding's table, which the store pins only with the embedding.
		return nil, fmt.Errorf("memory-budget: a tied %s model cannot be offloaded yet (its head reads the embedding's table)", cfg.Model.FamilyName())
	}
	var sizes [][]int
	st := &offloadState{L: len(shells), M: len(passes) / 2, first: []int{0}}
	st.fwdPass, st.bwdPass = make([]int, st.M), make([]int, st.M)
	for p, o := range passes {
		if o.backward {
			st.bwdPass[o.micro] = p
		} else {
			st.fwdPass[o.micro] = p
		}
	}
	for _, l := range shells {
		var s []int
		for _, p := range l.Params() {
			s = append(s, kernels.ShapeSize(p.Value.Shape))
			st.params = append(st.params, p)
		}
		sizes = append(sizes, s)
		st.first = append(st.first, len(st.params))
	}
	choice, err := offload.Choose(sizes, cfg.MemoryBudget, 0)
	if err != nil {
		return nil, fmt.Errorf("memory-budget: %w", err)
	}
	st.lay = choice.Layout
	st.opt = newShellOptimizer(st.params, cfg.adamW(), cfg.ClipNorm)
	st.sumSq = make([]float64, len(st.params))
	if err := os.MkdirAll(cfg.OffloadDir, 0o755); err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	st.store, err = offload.Open(offload.Config{Dir: cfg.OffloadDir, ChunkBytes: choice.ChunkBytes,
		Buffers: choice.Buffers, Bindings: st.bindings(), Ops: st.schedule(passes)})
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	for i, l := range shells {
		cs := st.ids(offload.Value, st.lay.LayerChunks[i])
		st.store.Pin(cs, allTrue(len(cs)))
		model.InitLayer(cfg.Model, l, cfg.Seed, first+i)
		st.store.Unpin(cs)
	}
	return st, nil
}

// ids are the chunk ids of chunks ks of kind.
func (st *offloadState) ids(kind int, ks []int) []int {
	out := make([]int, len(ks))
	for i, k := range ks {
		out[i] = kind*st.lay.PerKind + k
	}
	return out
}

func allTrue(n int) []bool {
	b := make([]bool, n)
	for i := range b {
		b[i] = true
	}
	return b
}

// bindings places every parameter's four tensors in their chunks.
func (st *offloadState) bindings() [][]offload.Binding {
	b := make([][]offload.Binding, offload.Kinds*st.lay.PerKind)
	st.chunkParams = make([][]int, st.lay.PerKind)
	for i, p := range st.params {
		k, off, n := st.lay.Chunk[i], st.lay.Off[i], kernels.ShapeSize(p.Value.Shape)
		st.chunkParams[k] = append(st.chunkParams[k], i)
		for kind, t := range []*kernels.Tensor{p.Value, p.Grad, st.opt.m[p.Name], st.opt.v[p.Name]} {
			id := kind*st.lay.PerKind + k
			b[id] = append(b[id], offload.Binding{Tensor: t, Off: off, N: n})
		}
	}
	return b
}

// schedule is one step's ops: the passes in order, a forward pass (weights) through the
// layers, a backward pass (weights and gradients) through them in reverse, then the
// optimizer chunk by chunk (weights, gradients and moments; the gradients die with the
// update).
func (st *offloadState) schedule(passes []op) []offload.Op {
	var ops []offload.Op
	for _, o := range passes {
		for i := 0; i < st.L; i++ {
			if !o.backward {
				cs := st.ids(offload.Value, st.lay.LayerChunks[i])
				ops = append(ops, offload.Op{Chunks: cs, Writes: make([]bool, len(cs))})
				continue
			}
			l := st.L - 1 - i
			v := st.ids(offload.Value, st.lay.LayerChunks[l])
			g := st.ids(offload.Grad, st.lay.LayerChunks[l])
			ops = append(ops, offload.Op{Chunks: append(v, g...), Writes: append(make([]bool, len(v)), allTrue(len(g))...)})
		}
	}
	for k := 0; k < st.lay.PerKind; k++ {
		cs := st.ids(offload.Value, []int{k})
		for kind := offload.Grad; kind < offload.Kinds; kind++ {
			cs = append(cs, kind*st.lay.PerKind+k)
		}
		ops = append(ops, offload.Op{Chunks: cs, Writes: []bool{true, false, true, true}, Discard: cs[1:2]})
	}
	return ops
}

// zeroGrads sets every gradient to zero without I/O.
func (st *offloadState) zeroGrads() {
	ks := make([]int, st.lay.PerKind)
	for k := range ks {
		ks[k] = k
	}
	st.store.Zero(st.ids(offload.Grad, ks))
}

// gradSumSquares is Optimizer.GradSumSquares: the same per-parameter sums, recorded by
// the last backward pass, added in the same order.
func (st *offloadState) gradSumSquares() float64 {
	var s float64
	for _, x := range st.sumSq {
		s += x
	}
	return s
}

// optimizerStep is Optimizer.Step chunk by chunk.
func (st *offloadState) optimizerStep(lr, sumSquares float64) {
	o := st.opt
	c := o.clipCoefficient(sumSquares)
	o.Steps++
	h := o.Hyper
	h.LR = lr
	base := 2 * st.L * st.M
	for k, ps := range st.chunkParams {
		st.store.Enter(base + k)
		for _, i := range ps {
			o.update(st.params[i], h, c)
		}
		st.store.Exit(base + k)
	}
}

// snapshot copies the tensors of kind (Value, ExpAvg or ExpAvgSq) out of the store, chunk
// by chunk, named as in a checkpoint.
func (st *offloadState) snapshot(kind int) map[string]*kernels.Tensor {
	suffix := map[int]string{offload.Value: "", offload.ExpAvg: ".exp_avg", offload.ExpAvgSq: ".exp_avg_sq"}[kind]
	out := make(map[string]*kernels.Tensor, len(st.params))
	for k, ps := range st.chunkParams {
		cs := st.ids(kind, []int{k})
		st.store.Pin(cs, nil)
		for _, i := range ps {
			p := st.params[i]
			out[p.Name+suffix] = st.tensor(kind, p).Clone()
		}
		st.store.Unpin(cs)
	}
	return out
}

func (st *offloadState) tensor(kind int, p *model.Param) *kernels.Tensor {
	switch kind {
	case offload.Value:
		return p.Value
	case offload.Grad:
		return p.Grad
	case offload.ExpAvg:
		return st.opt.m[p.Name]
	}
	return st.opt.v[p.Name]
}

// restore loads a checkpoint's weights and moments into the store chunk by chunk, after
// checking that every tensor is there with its shape (nothing changes otherwise).
func (st *offloadState) restore(ck *Checkpoint) error {
	steps, err := strconv.Atoi(ck.Optimizer.Metadata["step"])
	if err != nil || steps < 0 {
		return fmt.Errorf("%w: optimizer state has no valid step (%q)", model.ErrBadCheckpoint, ck.Optimizer.Metadata["step"])
	}
	src := map[int]*model.TensorFile{offload.Value: ck.Model, offload.ExpAvg: ck.Optimizer, offload.ExpAvgSq: ck.Optimizer}
	suffix := map[int]string{offload.Value: "", offload.ExpAvg: ".exp_avg", offload.ExpAvgSq: ".exp_avg_sq"}
	for _, kind := range []int{offload.Value, offload.ExpAvg, offload.ExpAvgSq} {
		for _, p := range st.params {
			t, ok := src[kind].Tensors[p.Name+suffix[kind]]
			if !ok {
				return fmt.Errorf("%w: tensor %s%s is missing", model.ErrBadCheckpoint, p.Name, suffix[kind])
			}
			if !t.SameShape(p.Value.Shape) {
				return fmt.Errorf("%w: tensor %s%s has shape %v, the model needs %v", model.ErrBadCheckpoint, p.Name, suffix[kind], t.Shape, p.Value.Shape)
			}
		}
	}
	for k, ps := range st.chunkParams {
		for _, kind := range []int{offload.Value, offload.ExpAvg, offload.ExpAvgSq} {
			cs := st.ids(kind, []int{k})
			st.store.Pin(cs, []bool{true})
			for _, i := range ps {
				p := st.params[i]
				copy(st.tensor(kind, p).Data, src[kind].Tensors[p.Name+suffix[kind]].Data)
			}
			st.store.Unpin(cs)
		}
	}
	st.opt.Steps = steps
	return nil
}

// close releases the store; a nil state (no memory budget) holds nothing to release.
func (st *offloadState) close() error {
	if st == nil {
		return nil
	}
	return st.store.Close()
}

// stats returns the store's counters, and false for a nil state (no memory budget).
func (st *offloadState) stats() (offload.Stats, bool) {
	if st == nil {
		return offload.Stats{}, false
	}
	return st.store.Stats(), true
}
