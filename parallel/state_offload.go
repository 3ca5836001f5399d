package parallel

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// offloadState is a stage's training state (weights, gradients, AdamW moments) in a chunk
// store under a memory budget. Its parameters and moments are shells whose Data the store
// binds to resident chunks while they are pinned; each layer's pass pins its chunks,
// following the schedule of a step: the passes in the order the step runs them (a
// pipeline stage's 1F1B or GPipe order; one stage runs every micro-batch forward then
// backward), each forward through the layers and each backward in reverse, then the
// optimizer chunk by chunk. A failure of the store's file is returned by every later call
// (*offload.IOError): the state is lost.
type offloadState struct {
	store  *offload.Store
	lay    offload.Layout
	layers []model.Layer // the shells, recomputed where asked
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
}

func (st *offloadState) Layers() []model.Layer  { return st.layers }
func (st *offloadState) Params() []*model.Param { return st.params }

// BeginStep zeroes the gradients (without I/O) and starts the store's scheduled step.
func (st *offloadState) BeginStep() error {
	st.zeroGrads()
	st.store.BeginStep()
	return nil
}

func (st *offloadState) EndStep() { st.store.EndStep() }

func (st *offloadState) Forward(ws *model.Workspace, mb *model.Batch, micro, i int, x []float32) ([]float32, model.Saved, error) {
	return scheduledForward(st.store, st.fwdPass[micro]*st.L+i, st.layers[i], ws, mb, x)
}

// Backward keeps the layer's chunks pinned past its pass: on the last micro-batch the
// gradients' part of the norm is read from them before the store may evict them.
func (st *offloadState) Backward(ws *model.Workspace, mb *model.Batch, micro, i int, saved model.Saved, dy []float32) ([]float32, error) {
	op := st.bwdPass[micro]*st.L + (st.L - 1 - i)
	if err := st.store.Enter(op); err != nil {
		return nil, err
	}
	defer st.store.Exit(op)
	dx := st.layers[i].Backward(ws, mb, saved, dy)
	if micro == st.M-1 { // the layer's gradients are final: their part of the norm
		for j := st.first[i]; j < st.first[i+1]; j++ {
			st.sumSq[j] = kernels.SumSquares(st.params[j].Grad.Data)
		}
	}
	return dx, nil
}

// EvalForward pins the layer's weights only, outside the step's schedule.
func (st *offloadState) EvalForward(ws *model.Workspace, mb *model.Batch, i int, x []float32) ([]float32, error) {
	cs := st.ids(offload.Value, st.lay.LayerChunks[i])
	if err := st.store.Pin(cs, nil); err != nil {
		return nil, err
	}
	defer st.store.Unpin(cs)
	y, _ := st.layers[i].Forward(ws, mb, x)
	return y, nil
}

// newOffloadState lays out the training state of the model's layers [first, last) for
// budget bytes, opens its store in cfg.OffloadDir with the schedule of a step
// that runs passes (every micro-batch's forward and backward once, backward passes in
// micro-batch order), and initialises the weights as model.InitLayer does.
func newOffloadState(cfg TrainConfig, first, last int, budget int64, recompute bool, passes []op) (*offloadState, error) {
	if cfg.Model.TiedHead() {
		// The head reads the embedding's table, which the store pins only with the embedding.
		return nil, fmt.Errorf("memory-budget: a tied %s model cannot be offloaded yet (its head reads the embedding's table)", cfg.Model.FamilyName())
	}
	shells := model.NewLayerShells(cfg.Model, first, last)
	var sizes [][]int
	st := &offloadState{layers: shells, L: len(shells), M: len(passes) / 2, first: []int{0}}
	if recompute {
		st.layers = model.WithRecompute(shells)
	}
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
	choice, err := offload.Choose(sizes, budget, 0)
	if err != nil {
		return nil, fmt.Errorf("memory-budget: %w", err)
	}
	st.lay = choice.Layout
	st.opt = newShellOptimizer(st.params, cfg.adamW(), cfg.ClipNorm)
	st.sumSq = make([]float64, len(st.params))
	if err := os.MkdirAll(cfg.OffloadDir, 0o755); err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	bindings := st.bindings()
	if err := checkOffloadRoom(cfg, int64(len(bindings))*choice.ChunkBytes); err != nil {
		return nil, err
	}
	st.store, err = offload.Open(offload.Config{Dir: cfg.OffloadDir, ChunkBytes: choice.ChunkBytes,
		Buffers: choice.Buffers, Bindings: bindings, Ops: st.schedule(passes)})
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	var init *model.TensorFile
	if cfg.Init != "" {
		if init, err = ReadInitWeights(cfg.Init); err != nil {
			st.store.Close()
			return nil, err
		}
	}
	for i, l := range shells {
		cs := st.ids(offload.Value, st.lay.LayerChunks[i])
		if err := st.store.Pin(cs, allTrue(len(cs))); err != nil {
			st.store.Close()
			return nil, fmt.Errorf("data-dir: %w", err)
		}
		model.InitLayer(cfg.Model, l, cfg.Seed, first+i)
		if init != nil {
			err = model.LoadParams(init, l.Params())
		}
		st.store.Unpin(cs)
		if err != nil {
			st.store.Close()
			return nil, fmt.Errorf("init %s: %w", cfg.Init, err)
		}
	}
	return st, nil
}

// ErrOffloadDiskShort means the data disk has no room for an offload store's file beside
// the reserve kept for the Raft WAL and blobs (jobspec.OffloadDiskRoom).
var ErrOffloadDiskShort = errors.New("not enough free disk for the offload store")

// checkOffloadRoom refuses an offload store of need bytes before anything is written when
// the disk of cfg.OffloadDir has less room than that (the plan was made from a free space
// announced earlier; the disk is shared with the WAL, blobs and other jobs).
func checkOffloadRoom(cfg TrainConfig, need int64) error {
	free := cfg.DiskFree
	if free == nil {
		free = offload.FreeBytes
	}
	have := free(cfg.OffloadDir)
	if have < 0 {
		return nil
	}
	if room := jobspec.OffloadDiskRoom(uint64(have)); uint64(need) > room {
		return fmt.Errorf("data-dir: %w: %s needs %d bytes, %d are free and %d may be used beside the reserve of max(1 GiB, 10%%) for the raft WAL and blobs; free space there or set memory.offload: off",
			ErrOffloadDiskShort, cfg.OffloadDir, need, have, room)
	}
	return nil
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

// GradSumSquares is Optimizer.GradSumSquares: the same per-parameter sums, recorded by
// the last backward pass, added in the same order.
func (st *offloadState) GradSumSquares() float64 {
	var s float64
	for _, x := range st.sumSq {
		s += x
	}
	return s
}

// Update is Optimizer.Step chunk by chunk.
func (st *offloadState) Update(lr, sumSquares float64) error {
	o := st.opt
	c := o.clipCoefficient(sumSquares)
	o.Steps++
	h := o.Hyper
	h.LR = lr
	base := 2 * st.L * st.M
	for k, ps := range st.chunkParams {
		if err := st.store.Enter(base + k); err != nil {
			return err
		}
		for _, i := range ps {
			o.update(st.params[i], h, c)
		}
		st.store.Exit(base + k)
	}
	return nil
}

func (st *offloadState) OptimizerSteps() int { return st.opt.Steps }

// Snapshot copies the weights and moments out of the store, chunk by chunk.
func (st *offloadState) Snapshot() (weights, moments map[string]*kernels.Tensor, meta map[string]string, err error) {
	if weights, err = st.snapshot(offload.Value); err != nil {
		return nil, nil, nil, err
	}
	if moments, err = st.snapshot(offload.ExpAvg); err != nil {
		return nil, nil, nil, err
	}
	v, err := st.snapshot(offload.ExpAvgSq)
	if err != nil {
		return nil, nil, nil, err
	}
	maps.Copy(moments, v)
	return weights, moments, map[string]string{"step": strconv.Itoa(st.opt.Steps)}, nil
}

// snapshot copies the tensors of kind (Value, ExpAvg or ExpAvgSq) out of the store, chunk
// by chunk, named as in a checkpoint.
func (st *offloadState) snapshot(kind int) (map[string]*kernels.Tensor, error) {
	out := make(map[string]*kernels.Tensor, len(st.params))
	for k, ps := range st.chunkParams {
		cs := st.ids(kind, []int{k})
		if err := st.store.Pin(cs, nil); err != nil {
			return nil, fmt.Errorf("snapshot: %w", err)
		}
		for _, i := range ps {
			p := st.params[i]
			out[p.Name+kindSuffix[kind]] = st.tensor(kind, p).Clone()
		}
		st.store.Unpin(cs)
	}
	return out, nil
}

// kindSuffix names a parameter's tensor of each kind in a checkpoint.
var kindSuffix = map[int]string{offload.Value: "", offload.ExpAvg: ".exp_avg", offload.ExpAvgSq: ".exp_avg_sq"}

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

// Restore loads a checkpoint's weights and moments (whole, or ZeRO's pieces) into the
// store chunk by chunk, after checking that every tensor is there with its shape and that
// the optimizer is at step (nothing changes otherwise).
func (st *offloadState) Restore(weights, moments *model.TensorFile, step int) error {
	moments = assembleMoments(moments, st.params)
	steps, err := strconv.Atoi(moments.Metadata["step"])
	if err != nil || steps < 0 {
		return fmt.Errorf("restore: %w: optimizer state has no valid step (%q)", model.ErrBadCheckpoint, moments.Metadata["step"])
	}
	if err := checkUpdates(steps, step); err != nil {
		return err
	}
	src := map[int]*model.TensorFile{offload.Value: weights, offload.ExpAvg: moments, offload.ExpAvgSq: moments}
	kinds := []int{offload.Value, offload.ExpAvg, offload.ExpAvgSq}
	for _, kind := range kinds {
		for _, p := range st.params {
			t, ok := src[kind].Tensors[p.Name+kindSuffix[kind]]
			if !ok {
				return fmt.Errorf("restore: %w: tensor %s%s is missing", model.ErrBadCheckpoint, p.Name, kindSuffix[kind])
			}
			if !t.SameShape(p.Value.Shape) {
				return fmt.Errorf("restore: %w: tensor %s%s has shape %v, the model needs %v", model.ErrBadCheckpoint, p.Name, kindSuffix[kind], t.Shape, p.Value.Shape)
			}
		}
	}
	for k, ps := range st.chunkParams {
		for _, kind := range kinds {
			cs := st.ids(kind, []int{k})
			if err := st.store.Pin(cs, []bool{true}); err != nil {
				return fmt.Errorf("restore: %w", err)
			}
			for _, i := range ps {
				p := st.params[i]
				copy(st.tensor(kind, p).Data, src[kind].Tensors[p.Name+kindSuffix[kind]].Data)
			}
			st.store.Unpin(cs)
		}
	}
	st.opt.Steps = steps
	return nil
}

// Stats returns the store's counters.
func (st *offloadState) Stats() (offload.Stats, bool) { return st.store.Stats(), true }

// Close releases the store (its file is already unlinked).
func (st *offloadState) Close() error { return st.store.Close() }

// scheduledForward runs layer l's forward pass as op of the store's schedule (a pass's
// position times the layers, plus the layer's), its chunks pinned around it.
func scheduledForward(store *offload.Store, op int, l model.Layer, ws *model.Workspace, mb *model.Batch, x []float32) ([]float32, model.Saved, error) {
	if err := store.Enter(op); err != nil {
		return nil, nil, err
	}
	defer store.Exit(op)
	y, saved := l.Forward(ws, mb, x)
	return y, saved, nil
}

// scheduledBackward is scheduledForward's backward pass (the layers in reverse in the pass).
func scheduledBackward(store *offload.Store, op int, l model.Layer, ws *model.Workspace, mb *model.Batch, saved model.Saved, dy []float32) ([]float32, error) {
	if err := store.Enter(op); err != nil {
		return nil, err
	}
	defer store.Exit(op)
	return l.Backward(ws, mb, saved, dy), nil
}
