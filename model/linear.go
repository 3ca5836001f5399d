package model

import (
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/kernels"
)

// linear is y = x·W + b with W stored [in, out] (GPT-2's Conv1D layout).
type linear struct {
	w, b    *Param
	in, out int
}

func newLinear(shell bool, prefix string, in, out int) linear {
	return linear{w: newParam(shell, prefix+".weight", in, out), b: newParam(shell, prefix+".bias", out), in: in, out: out}
}

func (l *linear) forward(ws *Workspace, x device.Tensor, rows int) device.Tensor {
	y := ws.AllocTensor(rows * l.out)
	ws.backend().MatmulForward(y, x, l.w.value(), l.b.value(), rows, l.in, l.out)
	return y
}

// backward accumulates dW += xᵀ·dy and db += Σ dy, and returns dx = dy·Wᵀ.
func (l *linear) backward(ws *Workspace, x, dy device.Tensor, rows int) device.Tensor {
	dx := ws.AllocTensor(rows * l.in)
	ws.backend().MatmulBackward(dx, l.w.grad(), l.b.grad(), dy, x, l.w.value(), rows, l.in, l.out)
	return dx
}

// layerNorm is GPT-2's LayerNorm with weight and bias over the last dimension.
type layerNorm struct {
	w, b *Param
	n    int
}

func newLayerNorm(shell bool, prefix string, n int) layerNorm {
	ln := layerNorm{w: newParam(shell, prefix+".weight", n), b: newParam(shell, prefix+".bias", n), n: n}
	for i := range ln.w.Value.Data {
		ln.w.Value.Data[i] = 1
	}
	return ln
}

type layerNormSaved struct{ mean, rstd device.Tensor }

func (l *layerNorm) forward(ws *Workspace, x device.Tensor, rows int) (device.Tensor, layerNormSaved) {
	y := ws.AllocTensor(rows * l.n)
	s := layerNormSaved{mean: ws.AllocTensor(rows), rstd: ws.AllocTensor(rows)}
	ws.backend().LayerNormForward(y, s.mean, s.rstd, x, l.w.value(), l.b.value(), rows, l.n, kernels.LayerNormEps)
	return y, s
}

// backward accumulates the gradient with respect to x into dx.
func (l *layerNorm) backward(ws *Workspace, dx, dy, x device.Tensor, s layerNormSaved, rows int) {
	ws.backend().LayerNormBackward(dx, l.w.grad(), l.b.grad(), dy, x, s.mean, s.rstd, l.w.value(), rows, l.n)
}
