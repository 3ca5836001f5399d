package parallel

import (
	"context"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// syncStrategy is how a worker's replicas synchronise and how its optimizer applies a
// step, chosen once when the worker is built (newSyncStrategy), as quic-go chooses its
// congestion algorithm: averaging gradients every step (sync_every_step.go), ZeRO's
// sharded update (zero.go), DiLoCo's outer steps (diloco.go) and streaming DiLoCo's
// outer steps per fragment (streaming.go). The step calls the hooks at fixed points and
// branches on no mode; one replica is the degenerate case of every-step averaging (its
// collectives have one member), as llm.c makes one process the degenerate case of ZeRO.
type syncStrategy interface {
	// reduce runs once the step's gradients are complete, before the update gate.
	reduce(ctx context.Context) error
	// update clips the gradients by the global norm across stages and applies AdamW, at
	// learning rate lr; skipped says the norm was not finite and nothing moved.
	update(ctx context.Context, lr float64) (skipped bool, err error)
	// afterStep runs once the step is counted; synced says the replicas synchronised.
	afterStep(ctx context.Context) (synced bool, err error)
	// consistent reports whether a checkpoint now is one model whichever replica wrote
	// each layer (Worker.Consistent).
	consistent() bool
	// snapshot completes s, whose model and optimizer tensors are the training state's,
	// with the strategy's own state.
	snapshot(s *StageState)
	// restore sets the training state and the strategy's own state from checkpoint
	// tensors; nothing changes unless every tensor is there with its shape.
	restore(weights, moments *model.TensorFile, step int) error
	// abandon drops what is in flight after a failed step.
	abandon()
	// momentElements is the number of AdamW moment elements the worker holds.
	momentElements() int
}

// newSyncStrategy chooses w's strategy from its job's sync configuration and its plan.
// offloaded: the stage's state is in an offload store (a plan of one replica).
func newSyncStrategy(w *Worker, offloaded bool) syncStrategy {
	base := baseSync{w: w}
	switch {
	case w.cfg.Sync.Zero > 0 && !offloaded:
		return newZeroSync(base)
	case w.numReplicas == 1: // nothing to synchronise: no outer step, no shards
		return everyStep{base}
	case w.cfg.Sync.Mode == jobspec.SyncDiLoCo:
		return newDiLoCoSync(base)
	case w.cfg.Sync.Mode == jobspec.SyncStreaming:
		return newStreamingSync(base)
	}
	return everyStep{base}
}

// baseSync is what the strategies share: AdamW on the training state after the global
// gradient norm, and no state of its own. Strategies embed it and override what differs.
type baseSync struct{ w *Worker }

func (baseSync) reduce(context.Context) error            { return nil }
func (baseSync) afterStep(context.Context) (bool, error) { return false, nil }
func (baseSync) consistent() bool                        { return true }
func (baseSync) snapshot(*StageState)                    {}
func (baseSync) abandon()                                {}
func (b baseSync) momentElements() int                   { return 2 * countParams(b.w.params) }

// restore restores the training state (the strategy keeps nothing of its own).
func (b baseSync) restore(weights, moments *model.TensorFile, step int) error {
	return b.w.state.Restore(weights, moments, step)
}

// update gathers the stage's Σg² from every stage of the replica and applies AdamW to the
// training state. A step whose norm is not finite is skipped: no parameter moves and the
// optimizer's state stays, instead of NaN spreading through AdamW.
func (b baseSync) update(ctx context.Context, lr float64) (bool, error) {
	w := b.w
	var norms []float64
	err := timed(&w.times.Sync, func() (err error) {
		norms, err = allGatherScalars(ctx, w.tr, w.stageGroup, w.roundKey(normIndex), w.state.GradSumSquares())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("step %d gradient norm: %w", w.step+1, err)
	}
	var total float64
	for _, n := range norms {
		total += n
	}
	if math.IsNaN(total) || math.IsInf(total, 0) {
		return true, nil // every stage of the replica gathered the same total: all skip
	}
	if err := w.state.Update(lr, total); err != nil {
		return false, fmt.Errorf("step %d update: %w", w.step+1, err)
	}
	return false, nil
}

// weigh scales a contribution by R·batch/global, so that the replicas' plain mean is the
// mean weighted by their batches (a no-op when they are equal).
func (w *Worker) weigh(x []float32) {
	if w.syncWeight == 1 {
		return
	}
	for i := range x {
		x[i] *= w.syncWeight
	}
}

func flattenGrads(ps []*model.Param) []float32 {
	out := make([]float32, 0, countParams(ps))
	for _, p := range ps {
		out = append(out, p.Grad.Data...)
	}
	return out
}

func unflattenGrads(ps []*model.Param, g []float32) {
	for _, p := range ps {
		g = g[copy(p.Grad.Data, g):]
	}
}
