package model

import "github.com/meshnode/meshnode/kernels"

// linear is y = x·W + b with W stored [in, out] (GPT-2's Conv1D layout).
type linear struct {
	w, b    *Param
	in, out int
}

func newLinear(shell bool, prefix string, in, out int) linear {
	return linear{w: newParam(shell, prefix+".weight", in, out), b: newParam(shell, prefix+".bias", out), in: in, out: out}
}

func (l *linear) forward(ws *Workspace, x []float32, rows int) []float32 {
	y := ws.AllocDirty(rows * l.out)
	kernels.Gemm(false, false, rows, l.out, l.in, 1, x, l.in, l.w.Value.Data, l.out, 0, y, l.out)
	kernels.AddBias(y, rows, l.out, l.b.Value.Data)
	return y
}

// backward accumulates dW += xᵀ·dy and db += Σ dy, and returns dx = dy·Wᵀ.
func (l *linear) backward(ws *Workspace, x, dy []float32, rows int) []float32 {
	kernels.Gemm(true, false, l.in, l.out, rows, 1, x, l.in, dy, l.out, 1, l.w.Grad.Data, l.out)
	kernels.BiasGrad(l.b.Grad.Data, dy, rows, l.out)
	dx := ws.AllocDirty(rows * l.in)
	kernels.Gemm(false, true, rows, l.in, l.out, 1, dy, l.out, l.w.Value.Data, l.out, 0, dx, l.in)
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

type layerNormSaved struct{ mean, rstd []float32 }

func (l *layerNorm) forward(ws *Workspace, x []float32, rows int) ([]float32, layerNormSaved) {
	y := ws.AllocDirty(rows * l.n)
	s := layerNormSaved{mean: ws.AllocDirty(rows), rstd: ws.AllocDirty(rows)}
	kernels.LayerNormForward(y, s.mean, s.rstd, x, l.w.Value.Data, l.b.Value.Data, rows, l.n, kernels.LayerNormEps)
	return y, s
}

// backward accumulates the gradient with respect to x into dx.
func (l *layerNorm) backward(dx, dy, x []float32, s layerNormSaved, rows int) {
	kernels.LayerNormBackward(dx, l.w.Grad.Data, l.b.Grad.Data, dy, x, s.mean, s.rstd, l.w.Value.Data, rows, l.n)
}
