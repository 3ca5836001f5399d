package parallel

import (
	"context"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// A tied model (gpt2, llama with tied: true) cut into pipeline stages has its token table
// in the first stage (the embedding's parameter, the only one clipped, optimised,
// synchronised and checkpointed) and a copy in the last (the head's view, model/tied.go).
// Before each step and each evaluation the first stage sends its table to the last;
// after the step's backward passes the last sends its gradient of the table to the
// first, which adds it into the embedding's gradient before anything reads the
// gradients (the replicas' synchronisation, the global norm). That is Megatron-LM's
// handling of tied embeddings with the exchange of the gradient replaced by one of the
// weights, so the copy can never drift from the table whatever the synchronisation does
// with it (a robust rule dropping a contribution, a lossy codec, DiLoCo's outer step).
// Each direction costs V·d floats per step; both count as pipeline traffic.

// Frame micro-batch numbers of the table exchanges (below evalMicro, above any real
// micro-batch).
const (
	tiedTableMicro     = 0x7ffd // the table, before a step
	tiedEvalTableMicro = 0x7ffe // the table, before an evaluation
	tiedGradMicro      = 0x7fff // the head's gradient of the table, after the backward passes
)

// tiedChunkFloats bounds one frame of a table exchange (32 MiB of float32), far below
// the data plane's payload bound.
const tiedChunkFloats = 8 << 20

// tiedTables sets the worker's part in a tied model's exchanges: the stage's table (the
// embedding's, or the head's copy) and the stage at the other end. A stage that holds
// both, or neither, takes no part.
func (w *Worker) tiedTables() {
	if !w.cfg.Train.Model.TiedHead() {
		return
	}
	e, h := model.TiedTables(w.state.Layers())
	switch {
	case e != nil && h != nil, e == nil && h == nil:
		return
	case e != nil:
		w.tied, w.tiedPeer = e, w.plan.Replicas[w.replica][w.numStages-1].Node
	default:
		w.tied, w.tiedPeer = h, w.plan.Replicas[w.replica][0].Node
	}
}

// shareTiedTable sends the embedding's table to the head's stage (first stage), or
// receives it into the head's copy (last stage); micro tells a step from an evaluation.
// The last stage's wait counts as pipeline bubble.
func (w *Worker) shareTiedTable(ctx context.Context, micro int) error {
	if w.tied == nil || (w.tied.Frozen && w.tiedShared) {
		return nil // a frozen table (LoRA's base) is sent once
	}
	w.tiedShared = true
	if w.stage == 0 {
		return w.sendTied(ctx, frame.KindActivation, micro, w.tied.Value.Data)
	}
	start := time.Now()
	err := w.recvTied(ctx, frame.KindActivation, micro, w.tied.Value.Data, false)
	w.pipelineStarved += int64(time.Since(start))
	w.times.Bubble += time.Since(start)
	return err
}

// foldTiedGrad makes the embedding's gradient of the token table whole at the end of a
// step's backward passes: within one stage by FoldTiedGrad; across stages by the last
// stage sending its gradient (then clearing it) and the first adding it.
func (w *Worker) foldTiedGrad(ctx context.Context) error {
	if w.tied == nil {
		model.FoldTiedGrad(w.state.Layers())
		return nil
	}
	if w.tied.Frozen {
		return nil // LoRA's base: neither end has a gradient of the table
	}
	if w.stage == 0 {
		return w.recvTied(ctx, frame.KindGradient, tiedGradMicro, w.tied.Grad.Data, true)
	}
	if err := w.sendTied(ctx, frame.KindGradient, tiedGradMicro, w.tied.Grad.Data); err != nil {
		return err
	}
	w.tied.Grad.Zero()
	return nil
}

func (w *Worker) sendTied(ctx context.Context, kind frame.Kind, micro int, x []float32) error {
	for c, lo := 0, 0; lo < len(x); c, lo = c+1, lo+tiedChunkFloats {
		part := x[lo:min(len(x), lo+tiedChunkFloats)]
		if err := w.send(ctx, w.tiedPeer, w.activationFrame(kind, micro, c, part, 1)); err != nil {
			return fmt.Errorf("tied table: %w", err)
		}
	}
	return nil
}

// recvTied receives a table exchange into x: overwriting it, or with add (the gradient)
// adding to it element by element.
func (w *Worker) recvTied(ctx context.Context, kind frame.Kind, micro int, x []float32, add bool) error {
	for c, lo := 0, 0; lo < len(x); c, lo = c+1, lo+tiedChunkFloats {
		part := x[lo:min(len(x), lo+tiedChunkFloats)]
		f, err := w.tr.Recv(ctx, w.tiedPeer, w.key(kind, micro, c))
		if err != nil {
			return fmt.Errorf("tied table: %w", err)
		}
		if f.DType != frame.DTypeF32 || f.Codec != frame.CodecNone || f.Elements() != len(part) {
			return fmt.Errorf("tied table chunk %d from %s: %v elements of dtype %d codec %d, want %d float32", c, w.tiedPeer, f.Shape, f.DType, f.Codec, len(part))
		}
		dst := part
		if add {
			dst = w.ws.AllocDirty(len(part))
		}
		if err := decodeF32(dst, f.Payload); err != nil {
			return fmt.Errorf("tied table chunk %d from %s: %w", c, w.tiedPeer, err)
		}
		if add {
			kernels.AddTo(part, dst)
		}
	}
	return nil
}
