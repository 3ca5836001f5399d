package model

import "github.com/meshnode/meshnode/kernels"

// A tied model's head computes with the embedding's token table, but its gradient of the
// table accumulates in a buffer of its own: the head's lm_head *Param, which shares the
// embedding's Value when both are in one stage and holds a copy of it in a pipeline
// stage without the embedding. FoldTiedGrad (one stage) or the pipeline (the head's stage
// sends that gradient to the embedding's, which adds it) makes the embedding's gradient
// the whole one at the end of a step: the embedding's accumulation plus the head's, one
// IEEE addition per element, which commutes, so a split run and a single process compute
// the same bits. Between steps the embedding's stage sends its table to the head's
// (TiedTables). Only the embedding lists the table among its parameters: it is clipped,
// optimised, synchronised and checkpointed once.

// TiedTables returns the token table the first layer holds (the embedding's, nil if
// layers do not start with the embedding) and the tied head's view of it (nil if layers
// do not end with a tied head). In a whole model both are set and share their Value.
func TiedTables(layers []Layer) (embedding, head *Param) {
	if len(layers) == 0 {
		return nil, nil
	}
	if e, ok := unwrap(layers[0]).(*Embedding); ok {
		embedding = e.wte
	}
	if h, ok := unwrap(layers[len(layers)-1]).(*Head); ok && h.tied {
		head = h.lmHead
	}
	return embedding, head
}

// FoldTiedGrad adds the tied head's gradient of the token table into the embedding's and
// clears the head's, in a stage that holds both (a whole model); elsewhere it does
// nothing.
func FoldTiedGrad(layers []Layer) {
	e, h := TiedTables(layers)
	if e == nil || h == nil || h.Frozen { // a frozen table (LoRA's base) has no gradient
		return
	}
	AddTiedGrad(e, h.Grad.Data)
	h.Grad.Zero()
}

// AddTiedGrad adds g, the head's gradient of the token table (from this stage or from
// the head's), into the embedding's table's gradient.
func AddTiedGrad(embedding *Param, g []float32) {
	kernels.AddTo(embedding.Grad.Data, g)
}

func unwrap(l Layer) Layer { return unwrapLayer(l) } // through Recomputed and LoRALayer
