package model

import (
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/kernels"
)

// Param is one named tensor of the model with its gradient.
type Param struct {
	// Name is the GPT-2 name, e.g. "transformer.h.0.attn.c_attn.weight".
	Name string
	// Value holds the weights; Grad accumulates their gradient (same shape). Both are in
	// host memory, and layers hand them to their backend as host tensors (device.Host):
	// the CPU backend computes on them in place. (A device backend's parameters will be
	// device tensors beside these; see docs/engine.md.)
	Value, Grad *kernels.Tensor
	// Decay says whether AdamW's weight decay applies: tensors of two or more dimensions.
	Decay bool
	// Frozen says the parameter is not trained (a LoRA base weight, model/lora.go): the
	// layers compute no gradient for it, and its Grad is nil.
	Frozen bool
}

// newParam returns a zero parameter of shape, or with shell a parameter whose tensors have
// the shape but no data (their Data is bound later, see NewLayerShells).
func newParam(shell bool, name string, shape ...int) *Param {
	if shell {
		return &Param{Name: name, Value: &kernels.Tensor{Shape: append([]int(nil), shape...)},
			Grad: &kernels.Tensor{Shape: append([]int(nil), shape...)}, Decay: len(shape) >= 2}
	}
	return &Param{Name: name, Value: kernels.NewTensor(shape...), Grad: kernels.NewTensor(shape...), Decay: len(shape) >= 2}
}

// value is the weights as a tensor of the layer's backend.
func (p *Param) value() device.Tensor { return device.Host(p.Value.Data) }

// grad is the gradient as a tensor of the layer's backend.
func (p *Param) grad() device.Tensor { return device.Host(p.Grad.Data) }

// gradOrScratch is grad, or for a frozen parameter a zeroed buffer of its size in ws that
// a kernel which always accumulates a weight gradient (the norms') may write and nobody
// reads.
func (p *Param) gradOrScratch(ws *Workspace) device.Tensor {
	if p.Frozen {
		return ws.allocZero(len(p.Value.Data))
	}
	return p.grad()
}

// Batch is one micro-batch: B sequences of T positions, row r = b·T + t.
type Batch struct {
	B, T int
	// Inputs are the B·T token ids the embedding reads.
	Inputs []int32
	// Targets are the B·T next tokens the head's loss reads.
	Targets []int32
	// RowLoss, when not nil, receives the head's cross-entropy of each of the B·T rows.
	RowLoss []float64
}

// Rows is B·T, the number of activation rows.
func (b *Batch) Rows() int { return b.B * b.T }

// Saved is what a layer's Forward keeps for its Backward; only that layer reads it.
type Saved any

// Layer is one element of the model's ordered layer list. Any contiguous slice of the list
// is a pipeline stage: the output of layer i is the input of layer i+1.
//
// Forward reads x (rows×d activations; ignored by the embedding, which reads the batch's
// tokens) and returns its output and what Backward will need. The head's output is the
// micro-batch's mean loss as a one-element slice. Backward takes the gradient of the loss
// with respect to Forward's output (for the head: the weight of this micro-batch's mean
// loss in the total), accumulates the parameters' gradients into Param.Grad, and returns the
// gradient with respect to x (nil for the embedding). Forward must not modify x, and the
// caller must not modify what Forward returned until Backward has run.
//
// All buffers come from ws, which the caller resets between steps.
type Layer interface {
	Name() string
	Params() []*Param
	Forward(ws *Workspace, mb *Batch, x []float32) (y []float32, saved Saved)
	Backward(ws *Workspace, mb *Batch, saved Saved, dy []float32) (dx []float32)
}
