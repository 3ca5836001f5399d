package parallel

import (
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// trainingState holds a stage's training state (weights, gradients, AdamW moments) and runs
// the stage's layers with that state in place. Its implementations, chosen once when the
// stage is built (newTrainingState), are residentState (in memory) and offloadState (chunks
// in a file under a memory budget, docs/memory.md Knob 4); the step is the same for both.
// Every method that may touch storage returns its error (an offload store's *offload.IOError:
// the state is lost), as raft's LogStore does: nothing panics for I/O.
type trainingState interface {
	// Layers are the stage's layers (recomputed where asked). Under a memory budget their
	// parameters' Data is bound only inside the calls below.
	Layers() []model.Layer
	// Params are the layers' parameters, in order.
	Params() []*model.Param
	// BeginStep zeroes the gradients and starts a step's schedule; EndStep ends it.
	BeginStep() error
	EndStep()
	// Forward runs layer i of micro-batch micro's forward pass, Backward its backward pass.
	Forward(ws *model.Workspace, mb *model.Batch, micro, i int, x []float32) ([]float32, model.Saved, error)
	Backward(ws *model.Workspace, mb *model.Batch, micro, i int, saved model.Saved, dy []float32) ([]float32, error)
	// EvalForward runs layer i forward outside a step (evaluation).
	EvalForward(ws *model.Workspace, mb *model.Batch, i int, x []float32) ([]float32, error)
	// GradSumSquares is the stage's Σg² after the step's last backward pass.
	GradSumSquares() float64
	// Update applies AdamW with learning rate lr, clipping by the global Σg² sumSquares.
	Update(lr, sumSquares float64) error
	// OptimizerSteps is the number of updates applied.
	OptimizerSteps() int
	// Snapshot copies the weights and the moments ("<name>.exp_avg", "<name>.exp_avg_sq",
	// the step count in meta) out of the state.
	Snapshot() (weights, moments map[string]*kernels.Tensor, meta map[string]string, err error)
	// Restore replaces the weights and moments with a checkpoint's, whose optimizer must be
	// at step; nothing changes unless every tensor is there with its shape.
	Restore(weights, moments *model.TensorFile, step int) error
	// Stats returns the offload store's counters, and false for a resident state.
	Stats() (offload.Stats, bool)
	// Close releases what the state holds.
	Close() error
}

// newTrainingState builds the training state of stage st's layers [First, Last) under
// cfg: resident, or offloaded under st.MemoryBudget, its store's schedule the stage's
// passes; recomputing when st.Recompute. The stage's plan entry is the one road by which
// both reach the state. withOptimizer false leaves the moments to ZeRO's shards (a
// resident state only).
func newTrainingState(cfg TrainConfig, st StagePlan, withOptimizer bool, passes []op) (trainingState, error) {
	if st.MemoryBudget > 0 && cfg.LoRA != nil { // the frozen base offloaded, read-only
		return newLoRAOffloadState(cfg, st.First, st.Last, st.MemoryBudget, st.Recompute, passes)
	}
	if st.MemoryBudget > 0 {
		return newOffloadState(cfg, st.First, st.Last, st.MemoryBudget, st.Recompute, passes)
	}
	return newResidentState(cfg, st.First, st.Last, st.Recompute, withOptimizer)
}
