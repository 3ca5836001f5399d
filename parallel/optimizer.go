package parallel

import (
	"fmt"
	"strconv"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// Optimizer is AdamW over a set of parameters (a whole model or one stage's layers), with
// global-norm clipping. Its state is the two moments of every parameter and the step count.
type Optimizer struct {
	Hyper    kernels.AdamW
	ClipNorm float64
	params   []*model.Param
	m, v     map[string]*kernels.Tensor
	// Steps is how many updates have been applied.
	Steps int
}

// NewOptimizer returns an optimizer for params with zero moments.
func NewOptimizer(params []*model.Param, hyper kernels.AdamW, clipNorm float64) *Optimizer {
	o := &Optimizer{Hyper: hyper, ClipNorm: clipNorm, params: params,
		m: map[string]*kernels.Tensor{}, v: map[string]*kernels.Tensor{}}
	for _, p := range params {
		o.m[p.Name] = kernels.NewTensor(p.Value.Shape...)
		o.v[p.Name] = kernels.NewTensor(p.Value.Shape...)
	}
	return o
}

// GradSumSquares is Σ g² over the parameters' gradients, the local part of the global norm
// (stages of a split model add theirs before clipping).
func (o *Optimizer) GradSumSquares() float64 {
	var s float64
	for _, p := range o.params {
		s += kernels.SumSquares(p.Grad.Data)
	}
	return s
}

// newShellOptimizer is NewOptimizer with moments that have their shapes but no data (an
// offload store binds them).
func newShellOptimizer(params []*model.Param, hyper kernels.AdamW, clipNorm float64) *Optimizer {
	o := &Optimizer{Hyper: hyper, ClipNorm: clipNorm, params: params,
		m: map[string]*kernels.Tensor{}, v: map[string]*kernels.Tensor{}}
	for _, p := range params {
		o.m[p.Name] = &kernels.Tensor{Shape: append([]int(nil), p.Value.Shape...)}
		o.v[p.Name] = &kernels.Tensor{Shape: append([]int(nil), p.Value.Shape...)}
	}
	return o
}

// Step clips the gradients to the global norm √sumSquares (0 disables clipping) and
// applies one AdamW update at learning rate lr, weight decay only on Param.Decay tensors.
func (o *Optimizer) Step(lr, sumSquares float64) {
	c := o.clipCoefficient(sumSquares)
	o.Steps++
	h := o.Hyper
	h.LR = lr
	for _, p := range o.params {
		o.update(p, h, c)
	}
}

// clipCoefficient is the factor the gradients are scaled by before the update (1: none).
func (o *Optimizer) clipCoefficient(sumSquares float64) float32 {
	if o.ClipNorm > 0 {
		if c := kernels.ClipCoefficient(sumSquares, o.ClipNorm); c < 1 {
			return c
		}
	}
	return 1
}

// update clips p's gradient by c and applies h to p (elementwise: parameters may be
// updated in any order, and chunk by chunk).
func (o *Optimizer) update(p *model.Param, h kernels.AdamW, c float32) {
	if c < 1 {
		kernels.Scale(p.Grad.Data, c)
	}
	h.Step(p.Value.Data, p.Grad.Data, o.m[p.Name].Data, o.v[p.Name].Data, o.Steps, p.Decay)
}

// State returns the moments as tensors named "<param>.exp_avg" and "<param>.exp_avg_sq",
// and the step count as metadata, the companion file of a checkpoint.
func (o *Optimizer) State() (map[string]*kernels.Tensor, map[string]string) {
	t := make(map[string]*kernels.Tensor, 2*len(o.params))
	for _, p := range o.params {
		t[p.Name+".exp_avg"] = o.m[p.Name]
		t[p.Name+".exp_avg_sq"] = o.v[p.Name]
	}
	return t, map[string]string{"step": strconv.Itoa(o.Steps)}
}

// Restore loads a State. Every moment must be present with its parameter's shape.
func (o *Optimizer) Restore(tf *model.TensorFile) error {
	steps, err := strconv.Atoi(tf.Metadata["step"])
	if err != nil || steps < 0 {
		return fmt.Errorf("%w: optimizer state has no valid step (%q)", model.ErrBadCheckpoint, tf.Metadata["step"])
	}
	for _, p := range o.params {
		for _, suffix := range []string{".exp_avg", ".exp_avg_sq"} {
			t, ok := tf.Tensors[p.Name+suffix]
			if !ok {
				return fmt.Errorf("%w: optimizer state lacks %s%s", model.ErrBadCheckpoint, p.Name, suffix)
			}
			if !t.SameShape(p.Value.Shape) {
				return fmt.Errorf("%w: optimizer state %s%s has shape %v, want %v", model.ErrBadCheckpoint, p.Name, suffix, t.Shape, p.Value.Shape)
			}
		}
	}
	for _, p := range o.params {
		copy(o.m[p.Name].Data, tf.Tensors[p.Name+".exp_avg"].Data)
		copy(o.v[p.Name].Data, tf.Tensors[p.Name+".exp_avg_sq"].Data)
	}
	o.Steps = steps
	return nil
}
