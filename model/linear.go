package model

import (
	"github.com/meshnode/meshnode/device"
)

// linear is y = x·W + b with W stored [in, out] (GPT-2's Conv1D layout).
type linear struct {
	w, b    *Param
	in, out int
	lora    *loraAdapter // nil: no adapter (model/lora.go)
}

func newLinear(shell bool, prefix string, in, out int) linear {
	return linear{w: newParam(shell, prefix+".weight", in, out), b: newParam(shell, prefix+".bias", out), in: in, out: out}
}

func (l *linear) forward(ws *Workspace, x device.Tensor, rows int) device.Tensor {
	y := ws.AllocTensor(rows * l.out)
	ws.backend().MatmulForward(y, x, l.w.value(), l.b.value(), rows, l.in, l.out)
	l.lora.forward(ws, x, y, rows)
	return y
}

// backward accumulates dW += xᵀ·dy and db += Σ dy, and returns dx = dy·Wᵀ. A frozen
// layer (LoRA's base) computes dx alone, and its adapter adds its gradients and its part
// of dx.
func (l *linear) backward(ws *Workspace, x, dy device.Tensor, rows int) device.Tensor {
	dx := ws.AllocTensor(rows * l.in)
	if l.w.Frozen {
		ws.backend().Gemm(false, true, rows, l.in, l.out, 1, dy, l.out, l.w.value(), l.out, 0, dx, l.in)
	} else {
		ws.backend().MatmulBackward(dx, l.w.grad(), l.b.grad(), dy, x, l.w.value(), rows, l.in, l.out)
	}
	l.lora.backward(ws, x, dy, dx, rows)
	return dx
}

// linearT is y = x·Wᵀ without bias, W stored [out, in] (torch's nn.Linear, Llama's layout).
type linearT struct {
	w       *Param
	in, out int
	lora    *loraAdapter // nil: no adapter (model/lora.go)
}

func newLinearT(shell bool, name string, in, out int) linearT {
	return linearT{w: newParam(shell, name, out, in), in: in, out: out}
}

func (l *linearT) forward(ws *Workspace, x device.Tensor, rows int) device.Tensor {
	y := ws.AllocTensor(rows * l.out)
	ws.backend().Gemm(false, true, rows, l.out, l.in, 1, x, l.in, l.w.value(), l.in, 0, y, l.out)
	l.lora.forward(ws, x, y, rows)
	return y
}

// backward accumulates dW += dyᵀ·x (not for a frozen W) and returns dx = dy·W, plus the
// adapter's gradients and part of dx.
func (l *linearT) backward(ws *Workspace, x, dy device.Tensor, rows int) device.Tensor {
	be := ws.backend()
	if !l.w.Frozen {
		be.Gemm(true, false, l.out, l.in, rows, 1, dy, l.out, x, l.in, 1, l.w.grad(), l.in)
	}
	dx := ws.AllocTensor(rows * l.in)
	be.Gemm(false, false, rows, l.in, l.out, 1, dy, l.out, l.w.value(), l.in, 0, dx, l.in)
	l.lora.backward(ws, x, dy, dx, rows)
	return dx
}

// norm is a normalisation over the last dimension: GPT-2's LayerNorm or Llama's RMSNorm.
type norm interface {
	forward(ws *Workspace, x device.Tensor, rows int) (device.Tensor, layerNormSaved)
	// backward accumulates the gradient with respect to x into dx.
	backward(ws *Workspace, dx, dy, x device.Tensor, s layerNormSaved, rows int)
	params() []*Param
}

// rmsNorm is Llama's RMSNorm with a weight and no bias.
type rmsNorm struct {
	w   *Param
	n   int
	eps float32
}

func newRMSNorm(shell bool, name string, n int, eps float32) *rmsNorm {
	return &rmsNorm{w: newParam(shell, name, n), n: n, eps: eps}
}

func (l *rmsNorm) params() []*Param { return []*Param{l.w} }

func (l *rmsNorm) forward(ws *Workspace, x device.Tensor, rows int) (device.Tensor, layerNormSaved) {
	y := ws.AllocTensor(rows * l.n)
	s := layerNormSaved{rstd: ws.AllocTensor(rows)}
	ws.backend().RMSNormForward(y, s.rstd, x, l.w.value(), rows, l.n, l.eps)
	return y, s
}

func (l *rmsNorm) backward(ws *Workspace, dx, dy, x device.Tensor, s layerNormSaved, rows int) {
	ws.backend().RMSNormBackward(dx, l.w.gradOrScratch(ws), dy, x, s.rstd, l.w.value(), rows, l.n)
}

// layerNorm is GPT-2's LayerNorm with weight and bias over the last dimension.
type layerNorm struct {
	w, b *Param
	n    int
	eps  float32
}

func newLayerNorm(shell bool, prefix string, n int, eps float32) layerNorm {
	ln := layerNorm{w: newParam(shell, prefix+".weight", n), b: newParam(shell, prefix+".bias", n), n: n, eps: eps}
	for i := range ln.w.Value.Data {
		ln.w.Value.Data[i] = 1
	}
	return ln
}

// layerNormSaved is what a normalisation keeps for its backward pass: each row's mean
// (LayerNorm only) and reciprocal standard deviation or root mean square.
type layerNormSaved struct{ mean, rstd device.Tensor }

func (l *layerNorm) params() []*Param { return []*Param{l.w, l.b} }

func (l *layerNorm) forward(ws *Workspace, x device.Tensor, rows int) (device.Tensor, layerNormSaved) {
	y := ws.AllocTensor(rows * l.n)
	s := layerNormSaved{mean: ws.AllocTensor(rows), rstd: ws.AllocTensor(rows)}
	ws.backend().LayerNormForward(y, s.mean, s.rstd, x, l.w.value(), l.b.value(), rows, l.n, l.eps)
	return y, s
}

// backward accumulates the gradient with respect to x into dx.
func (l *layerNorm) backward(ws *Workspace, dx, dy, x device.Tensor, s layerNormSaved, rows int) {
	ws.backend().LayerNormBackward(dx, l.w.gradOrScratch(ws), l.b.gradOrScratch(ws), dy, x, s.mean, s.rstd, l.w.value(), rows, l.n)
}
