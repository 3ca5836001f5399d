package model

import "github.com/meshnode/meshnode/device"

// Recomputed is a layer trained with activation recomputation: its Forward keeps only its
// input (the checkpoint) and the output it passes on, and its Backward runs the forward
// pass again from the checkpoint before propagating the gradient. Everything the inner
// layer's passes allocate lives in scratch workspaces shared by the stage's recomputed
// layers and reset before each pass, so a stage holds one layer's intermediate
// activations at a time instead of every layer's for every micro-batch in flight. The
// recomputed forward is the same computation on the same input, so losses and gradients
// are bit-identical to training without recomputation; the price is one more forward
// pass of the layer per micro-batch.
type Recomputed struct {
	Layer
	scratch *recomputeScratch
}

// recomputeScratch are the two workspaces a stage's recomputed layers share. A block's
// (a Block's or a LlamaBlock's) backward pass keeps its recomputed attention half in a
// while its MLP half is recomputed and differentiated in b, then differentiates the
// attention half in b: the MLP's activations are gone before the attention's gradients
// need room.
type recomputeScratch struct{ a, b Workspace }

// recomputeSaved is what a recomputed layer keeps between its passes: its input.
type recomputeSaved struct{ x []float32 }

// WithRecompute returns layers with every block (Block, LlamaBlock) and the Head wrapped
// in Recomputed, all
// sharing one scratch (a stage runs its passes one at a time). The embedding, which saves
// nothing, is returned as it is. The parameters are the same *Param values.
func WithRecompute(layers []Layer) []Layer {
	scratch := &recomputeScratch{}
	out := make([]Layer, len(layers))
	for i, l := range layers {
		switch l.(type) {
		case *Block, *LlamaBlock, *Head:
			l = &Recomputed{Layer: l, scratch: scratch}
		}
		out[i] = l
	}
	return out
}

// scratchFor returns the scratch workspaces, computing on ws's backend.
func (r *Recomputed) scratchFor(ws *Workspace) (a, b *Workspace) {
	a, b = &r.scratch.a, &r.scratch.b
	a.Backend, b.Backend = ws.Backend, ws.Backend
	return a, b
}

// ScratchPeakBytes is the most the stage's scratch workspaces have held, summed (an upper
// bound of their peak together).
func (r *Recomputed) ScratchPeakBytes() int64 {
	return r.scratch.a.PeakBytes() + r.scratch.b.PeakBytes()
}

// Forward runs the inner layer's forward pass in scratch and copies its output to ws;
// only the input is kept for Backward.
func (r *Recomputed) Forward(ws *Workspace, mb *Batch, x []float32) ([]float32, Saved) {
	sa, sb := r.scratchFor(ws)
	sa.Reset()
	var y []float32
	switch blk := r.Layer.(type) {
	case *Block:
		// The block's halves in a and b, as Backward recomputes them: the scratch peak is
		// the backward pass's, not one block's whole forward pass.
		s := &blockSaved{x: sa.input(x)}
		blk.forwardAttn(sa, mb, s)
		sb.Reset()
		blk.forwardMLP(sb, mb, s)
		y = sb.output(blk.output(sb, mb, s))
	case *LlamaBlock:
		s := &llamaSaved{x: sa.input(x)}
		blk.forwardAttn(sa, mb, s)
		sb.Reset()
		blk.forwardMLP(sb, mb, s)
		y = sb.output(blk.output(sb, mb, s))
	default:
		y, _ = r.Layer.Forward(sa, mb, x)
	}
	return ws.keep(y), recomputeSaved{x: x}
}

// Backward recomputes the inner layer's forward pass from the kept input and runs its
// backward pass, both in scratch, and copies the input's gradient to ws.
func (r *Recomputed) Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) []float32 {
	x := saved.(recomputeSaved).x
	sa, sb := r.scratchFor(ws)
	sa.Reset()
	var dx []float32
	switch blk := r.Layer.(type) {
	case *Block:
		dx = recomputeHalves(sa, sb, mb, blk, &blockSaved{x: sa.input(x)}, dy)
	case *LlamaBlock:
		dx = recomputeHalves(sa, sb, mb, blk, &llamaSaved{x: sa.input(x)}, dy)
	default:
		_, inner := r.Layer.Forward(sa, mb, x)
		dx = r.Layer.Backward(sa, mb, inner, dy)
	}
	return ws.keep(dx)
}

// halves is a block computed in two halves, attention then MLP, each keeping what its
// backward pass needs in S: what recomputeHalves runs.
type halves[S any] interface {
	forwardAttn(ws *Workspace, mb *Batch, s S)
	forwardMLP(ws *Workspace, mb *Batch, s S)
	backwardMLP(ws *Workspace, mb *Batch, s S, dy device.Tensor) device.Tensor
	backwardAttn(ws *Workspace, mb *Batch, s S, dx2 device.Tensor) device.Tensor
}

// recomputeHalves recomputes blk's forward pass into s (attention in sa, the MLP in sb),
// runs the MLP's backward pass in sb, keeps its gradient in sa, frees sb for the
// attention's backward pass and returns the input's gradient: a block's peak scratch is
// one half's activations, not both.
func recomputeHalves[S any](sa, sb *Workspace, mb *Batch, blk halves[S], s S, dy []float32) []float32 {
	blk.forwardAttn(sa, mb, s)
	sb.Reset()
	blk.forwardMLP(sb, mb, s)
	dx2 := blk.backwardMLP(sb, mb, s, sb.input(dy))
	kept := sa.AllocTensor(dx2.Len())
	sa.backend().Copy(kept, dx2)
	sb.Reset()
	return sb.output(blk.backwardAttn(sb, mb, s, kept))
}
