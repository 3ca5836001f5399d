package parallel

import (
	"fmt"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// StageState is a copy of a worker's weights and optimizer state at the end of a step,
// taken quickly on the training goroutine so that it can be written out in the
// background. Tensors carry GPT-2 names; moments are "<name>.exp_avg" and
// "<name>.exp_avg_sq" with the optimizer's step count in OptimizerMeta, and, for DiLoCo
// across replicas, the outer Nesterov momentum "<name>.outer_momentum" (the same on every
// replica: each applies the same averaged pseudo-gradient). Where replicas exchange
// compressed vectors, the optimizer tensors also hold the replica's error-feedback
// residual, "<name>.ef_residual.r<replica>" (what compression has not yet delivered; it
// differs between replicas, hence the replica in the name).
type StageState struct {
	Step          int
	Replica       int // the plan replica of the worker
	First, Last   int
	Model         map[string]*kernels.Tensor
	Optimizer     map[string]*kernels.Tensor
	OptimizerMeta map[string]string
}

// Snapshot copies the worker's layers and optimizer state (an offloading stage's chunk
// by chunk; an error means its store's file failed and the state is lost), with its sync
// strategy's state and its error-feedback residuals.
func (w *Worker) Snapshot() (StageState, error) {
	st := w.plan.Replicas[w.replica][w.stage]
	s := StageState{Step: w.step, Replica: w.replica, First: st.First, Last: st.Last}
	var err error
	if s.Model, s.Optimizer, s.OptimizerMeta, err = w.state.Snapshot(); err != nil {
		return s, err
	}
	w.sync.snapshot(&s)
	for i, ef := range w.feedback {
		if ef == nil || len(w.runs[i].group.Members) < 2 {
			continue
		}
		off := 0
		for _, p := range w.runParams[i] {
			t := kernels.NewTensor(p.Value.Shape...)
			off += copy(t.Data, ef.residual[off:])
			s.Optimizer[p.Name+residualSuffix(w.replica)] = t
		}
	}
	return s, nil
}

// residualSuffix names a replica's error-feedback residual of a parameter in a checkpoint.
func residualSuffix(replica int) string { return fmt.Sprintf(".ef_residual.r%d", replica) }

// outerMomentumSuffix names DiLoCo's outer momentum of a parameter in a checkpoint.
const outerMomentumSuffix = ".outer_momentum"

// Consistent reports whether every replica holds the same weights after the steps done so
// far: always in sync mode, only right after an outer step in DiLoCo. Checkpoints are
// taken there, so a checkpoint is one model whichever replica wrote each layer.
//
// In streaming the replicas' own weights never agree mid-run, but their global weights
// (every fragment's anchor) do: it is consistent where no fragment of the model is in
// flight (the same steps on every worker, whichever fragments it holds), where the
// snapshot's model is the global weights and each replica's own weights travel with its
// optimizer state (streamingSync.snapshot).
func (w *Worker) Consistent() bool { return w.sync.consistent() }

// Restore sets the worker's layers, optimizer state and step from checkpoint tensors that
// cover at least its layers (they may come from several files of another plan's stages).
// DiLoCo's anchor becomes the restored weights and its outer momentum is restored when the
// checkpoint has it (zero otherwise, as for a checkpoint of a sync-mode run). The codecs'
// error-feedback residuals are restored from this worker's replica's residuals where the
// checkpoint has them, and are zero otherwise (another replica's residual is not this
// one's to send). Nothing changes unless every tensor is present with its shape.
func (w *Worker) Restore(weights *model.TensorFile, moments *model.TensorFile, step int) error {
	if err := w.sync.restore(weights, moments, step); err != nil {
		return err
	}
	w.step = step
	w.mirrorAt = -1 // the stage weight mirror runs again at its next step (stage_mirror.go)
	w.restoreResiduals(moments)
	return nil
}

// restoreResiduals restores the error-feedback residuals.
func (w *Worker) restoreResiduals(moments *model.TensorFile) {
	for i, ef := range w.feedback {
		if ef == nil {
			continue
		}
		clear(ef.residual)
		off := 0
		for _, p := range w.runParams[i] {
			if t, ok := moments.Tensors[p.Name+residualSuffix(w.replica)]; ok && t.SameShape(p.Value.Shape) {
				copy(ef.residual[off:], t.Data)
			}
			off += p.Value.Size()
		}
	}
}

// LayerRange is the worker's layers [first, last).
func (w *Worker) LayerRange() (first, last int) {
	st := w.plan.Replicas[w.replica][w.stage]
	return st.First, st.Last
}
