package parallel

import (
	"fmt"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// residentState is a stage's training state in memory: its layers' own tensors and an
// Optimizer (none under ZeRO, whose shards hold the moments).
type residentState struct {
	layers []model.Layer
	params []*model.Param
	opt    *Optimizer // nil under ZeRO
	cfg    TrainConfig
}

func newResidentState(cfg TrainConfig, first, last int, recompute, withOptimizer bool) (*residentState, error) {
	layers, err := stageLayers(cfg, first, last, recompute)
	if err != nil {
		return nil, err
	}
	s := &residentState{layers: layers, cfg: cfg}
	s.params = model.LayerParams(s.layers) // under LoRA, the adapters alone
	if withOptimizer {
		s.opt = NewOptimizer(s.params, cfg.adamW(), cfg.ClipNorm)
	}
	return s, nil
}

func (s *residentState) Layers() []model.Layer  { return s.layers }
func (s *residentState) Params() []*model.Param { return s.params }

func (s *residentState) BeginStep() error {
	model.ZeroGrads(s.layers)
	return nil
}

func (s *residentState) EndStep() {}

func (s *residentState) Forward(ws *model.Workspace, mb *model.Batch, _, i int, x []float32) ([]float32, model.Saved, error) {
	y, saved := s.layers[i].Forward(ws, mb, x)
	return y, saved, nil
}

func (s *residentState) Backward(ws *model.Workspace, mb *model.Batch, _, i int, saved model.Saved, dy []float32) ([]float32, error) {
	return s.layers[i].Backward(ws, mb, saved, dy), nil
}

func (s *residentState) EvalForward(ws *model.Workspace, mb *model.Batch, i int, x []float32) ([]float32, error) {
	y, _ := s.layers[i].Forward(ws, mb, x)
	return y, nil
}

func (s *residentState) GradSumSquares() float64 { return s.opt.GradSumSquares() }

func (s *residentState) Update(lr, sumSquares float64) error {
	s.opt.Step(lr, sumSquares)
	return nil
}

func (s *residentState) OptimizerSteps() int { return s.opt.Steps }

func (s *residentState) Snapshot() (weights, moments map[string]*kernels.Tensor, meta map[string]string, err error) {
	weights = make(map[string]*kernels.Tensor, len(s.params))
	for _, p := range s.params {
		weights[p.Name] = p.Value.Clone()
	}
	if s.opt == nil { // ZeRO's shards hold the moments
		return weights, map[string]*kernels.Tensor{}, map[string]string{}, nil
	}
	opt, meta := s.opt.State()
	moments = make(map[string]*kernels.Tensor, len(opt))
	for k, t := range opt {
		moments[k] = t.Clone()
	}
	return weights, moments, meta, nil
}

func (s *residentState) Restore(weights, moments *model.TensorFile, step int) error {
	opt := NewOptimizer(s.params, s.cfg.adamW(), s.cfg.ClipNorm)
	if err := opt.Restore(assembleMoments(moments, s.params)); err != nil {
		return fmt.Errorf("restore optimizer: %w", err)
	}
	if err := checkUpdates(opt.Steps, step); err != nil {
		return err
	}
	if err := model.LoadParams(weights, s.params); err != nil {
		return fmt.Errorf("restore weights: %w", err)
	}
	s.opt = opt
	return nil
}

func (s *residentState) Stats() (offload.Stats, bool) { return offload.Stats{}, false }
func (s *residentState) Close() error                 { return nil }

// checkUpdates checks a checkpoint's optimizer update count against the step it was taken
// at: never more updates than steps, and fewer only by the steps skipped for a gradient
// norm that was not finite (every stage skips those alike, and the optimizer applies no
// update, as PyTorch's does not). Requiring them equal made every checkpoint after a
// skipped step unrestorable.
func checkUpdates(updates, step int) error {
	if updates < 0 || updates > step {
		return fmt.Errorf("restore: optimizer state is at update %d, the checkpoint at step %d", updates, step)
	}
	return nil
}
