package parallel

import (
	"fmt"
	"os"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// loraOffloadState is a LoRA stage's training state under a memory budget: the frozen base
// weights live in an offload store, read-only (written once when initialised; every pass
// pins a layer's weight chunks without marking them written, so an evicted chunk is
// dropped, never written back), while the adapters, their gradients and their AdamW
// moments, a percent of the stage or less, stay resident in the residentState it embeds.
// The base has no gradient or moment chunks: a LoRA step neither computes nor keeps them.
type loraOffloadState struct {
	*residentState // the adapted layers, the adapters and their optimizer
	store          *offload.Store
	lay            offload.Layout
	L              int
	// fwdPass[m] and bwdPass[m] are the positions of micro-batch m's passes in the step's
	// pass order, as offloadState's.
	fwdPass, bwdPass []int
}

// newLoRAOffloadState lays out the base weights of layers [first, last) for budget bytes,
// opens the store in cfg.OffloadDir with the schedule of passes (each pass pins each
// layer's weight chunks, read-only), initialises the base (the seed's, then cfg.Init's)
// and adds cfg.LoRA's adapters.
func newLoRAOffloadState(cfg TrainConfig, first, last int, budget int64, recompute bool, passes []op) (*loraOffloadState, error) {
	if cfg.Model.TiedHead() {
		return nil, fmt.Errorf("memory-budget: a tied %s model cannot be offloaded yet (its head reads the embedding's table)", cfg.Model.FamilyName())
	}
	shells := model.NewLayerShells(cfg.Model, first, last)
	var sizes [][]int
	var base []*model.Param
	for _, l := range shells {
		var s []int
		for _, p := range l.Params() {
			s = append(s, kernels.ShapeSize(p.Value.Shape))
			base = append(base, p)
		}
		sizes = append(sizes, s)
	}
	choice, err := offload.Choose(sizes, budget, 0)
	if err != nil {
		return nil, fmt.Errorf("memory-budget: %w", err)
	}
	st := &loraOffloadState{lay: choice.Layout, L: len(shells)}
	st.fwdPass, st.bwdPass = passPositions(passes)
	if err := os.MkdirAll(cfg.OffloadDir, 0o755); err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	st.store, err = offload.Open(offload.Config{Dir: cfg.OffloadDir, ChunkBytes: choice.ChunkBytes,
		Buffers: choice.Buffers, Bindings: st.bindings(base), Ops: st.schedule(passes)})
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	if err := st.initBase(cfg, shells, first); err != nil {
		st.store.Close()
		return nil, err
	}
	layers := shells
	if recompute {
		layers = model.WithRecompute(layers)
	}
	if layers, err = model.WithLoRA(cfg.Model, layers, *cfg.LoRA, cfg.Seed); err != nil {
		st.store.Close()
		return nil, err
	}
	params := model.LayerParams(layers)
	st.residentState = &residentState{layers: layers, params: params, cfg: cfg,
		opt: NewOptimizer(params, cfg.adamW(), cfg.ClipNorm)}
	return st, nil
}

// passPositions are the positions of each micro-batch's forward and backward pass.
func passPositions(passes []op) (fwd, bwd []int) {
	M := len(passes) / 2
	fwd, bwd = make([]int, M), make([]int, M)
	for p, o := range passes {
		if o.backward {
			bwd[o.micro] = p
		} else {
			fwd[o.micro] = p
		}
	}
	return fwd, bwd
}

// bindings places every base weight in its chunk of the Value kind; the other kinds'
// chunks hold nothing.
func (st *loraOffloadState) bindings(base []*model.Param) [][]offload.Binding {
	b := make([][]offload.Binding, offload.Kinds*st.lay.PerKind)
	for i, p := range base {
		id := offload.Value*st.lay.PerKind + st.lay.Chunk[i]
		b[id] = append(b[id], offload.Binding{Tensor: p.Value, Off: st.lay.Off[i], N: kernels.ShapeSize(p.Value.Shape)})
	}
	return b
}

// schedule is one step's ops: in each pass, each layer's weight chunks, read-only (the
// backward passes in reverse layer order). The adapters' update is resident: no op.
func (st *loraOffloadState) schedule(passes []op) []offload.Op {
	var ops []offload.Op
	for _, o := range passes {
		for i := 0; i < st.L; i++ {
			l := i
			if o.backward {
				l = st.L - 1 - i
			}
			cs := st.ids(st.lay.LayerChunks[l])
			ops = append(ops, offload.Op{Chunks: cs, Writes: make([]bool, len(cs))})
		}
	}
	return ops
}

// initBase writes the base's initial weights, layer by layer: the seed's, then Init's.
func (st *loraOffloadState) initBase(cfg TrainConfig, shells []model.Layer, first int) error {
	var init *model.TensorFile
	if cfg.Init != "" {
		var err error
		if init, err = ReadInitWeights(cfg.Init); err != nil {
			return err
		}
	}
	for i, l := range shells {
		cs := st.ids(st.lay.LayerChunks[i])
		if err := st.store.Pin(cs, allTrue(len(cs))); err != nil {
			return fmt.Errorf("data-dir: %w", err)
		}
		model.InitLayer(cfg.Model, l, cfg.Seed, first+i)
		var err error
		if init != nil {
			err = model.LoadParams(init, l.Params())
		}
		st.store.Unpin(cs)
		if err != nil {
			return fmt.Errorf("init %s: %w", cfg.Init, err)
		}
	}
	return nil
}

// ids are the Value chunk ids of chunks ks.
func (st *loraOffloadState) ids(ks []int) []int {
	out := make([]int, len(ks))
	for i, k := range ks {
		out[i] = offload.Value*st.lay.PerKind + k
	}
	return out
}

func (st *loraOffloadState) BeginStep() error {
	model.ZeroGrads(st.layers) // the adapters'
	st.store.BeginStep()
	return nil
}

func (st *loraOffloadState) EndStep() { st.store.EndStep() }

func (st *loraOffloadState) Forward(ws *model.Workspace, mb *model.Batch, micro, i int, x []float32) ([]float32, model.Saved, error) {
	return scheduledForward(st.store, st.fwdPass[micro]*st.L+i, st.layers[i], ws, mb, x)
}

func (st *loraOffloadState) Backward(ws *model.Workspace, mb *model.Batch, micro, i int, saved model.Saved, dy []float32) ([]float32, error) {
	return scheduledBackward(st.store, st.bwdPass[micro]*st.L+(st.L-1-i), st.layers[i], ws, mb, saved, dy)
}

// EvalForward pins the layer's weights only, outside the step's schedule.
func (st *loraOffloadState) EvalForward(ws *model.Workspace, mb *model.Batch, i int, x []float32) ([]float32, error) {
	cs := st.ids(st.lay.LayerChunks[i])
	if err := st.store.Pin(cs, nil); err != nil {
		return nil, err
	}
	defer st.store.Unpin(cs)
	y, _ := st.layers[i].Forward(ws, mb, x)
	return y, nil
}

func (st *loraOffloadState) Stats() (offload.Stats, bool) { return st.store.Stats(), true }
func (st *loraOffloadState) Close() error                 { return st.store.Close() }
