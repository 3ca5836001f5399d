package parallel

import (
	"fmt"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// StageState is a copy of a worker's weights and optimizer state at the end of a step,
// taken quickly on the training goroutine so that it can be written out in the
// background. Tensors carry GPT-2 names; moments are "<name>.exp_avg" and
// "<name>.exp_avg_sq" with the optimizer's step count in OptimizerMeta.
type StageState struct {
	Step          int
	First, Last   int
	Model         map[string]*kernels.Tensor
	Optimizer     map[string]*kernels.Tensor
	OptimizerMeta map[string]string
}

// Snapshot copies the worker's layers and optimizer state.
func (w *Worker) Snapshot() StageState {
	st := w.plan.Replicas[w.replica][w.stage]
	s := StageState{Step: w.step, First: st.First, Last: st.Last, Model: map[string]*kernels.Tensor{}, Optimizer: map[string]*kernels.Tensor{}}
	for _, p := range w.params {
		s.Model[p.Name] = p.Value.Clone()
	}
	opt, meta := w.opt.State()
	for k, t := range opt {
		s.Optimizer[k] = t.Clone()
	}
	s.OptimizerMeta = meta
	return s
}

// Restore sets the worker's layers, optimizer state and step from checkpoint tensors that
// cover at least its layers (they may come from several files of another plan's stages).
// DiLoCo's anchor becomes the restored weights and its outer momentum restarts at zero.
// Nothing changes unless every tensor is present with its shape.
func (w *Worker) Restore(weights *model.TensorFile, moments *model.TensorFile, step int) error {
	opt := NewOptimizer(w.params, w.opt.Hyper, w.opt.ClipNorm)
	if err := opt.Restore(moments); err != nil {
		return fmt.Errorf("restore optimizer: %w", err)
	}
	if opt.Steps != step {
		return fmt.Errorf("restore: optimizer state is at step %d, the checkpoint at %d", opt.Steps, step)
	}
	if err := model.LoadParams(weights, w.params); err != nil {
		return fmt.Errorf("restore weights: %w", err)
	}
	w.opt, w.step = opt, step
	for i := range w.outer {
		w.outer[i] = newOuterRun(w.runParams[i])
	}
	return nil
}

// LayerRange is the worker's layers [first, last).
func (w *Worker) LayerRange() (first, last int) {
	st := w.plan.Replicas[w.replica][w.stage]
	return st.First, st.Last
}
