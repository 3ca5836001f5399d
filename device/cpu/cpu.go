package cpu

import (
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/kernels"
)

// Backend is the CPU backend. It has no state: its zero value is ready, and every value
// computes the same. Each method meets device.Backend's specification of it with the
// kernels function of the same name (MatmulForward: Gemm then AddBias; MatmulBackward:
// Gemm, BiasGrad, Gemm; AdamWStep: AdamW.Step), so it inherits that function's
// guarantees: results independent of the thread count, no writes outside the outputs.
// A tensor in device memory is a programming error and panics.
type Backend struct{}

// New returns the CPU backend.
func New() Backend { return Backend{} }

var _ device.Backend = Backend{}

// f32 is t's host elements; a tensor in device memory is a programming error here.
func f32(t device.Tensor) []float32 {
	if m, _ := t.Memory(); m != nil {
		panic("device/cpu: tensor in " + m.Device().String() + " memory given to the CPU backend")
	}
	return t.Host()
}

// Name is "cpu/" and the GEMM path kernels chose at start-up (avx512, avx2 or go).
func (Backend) Name() string { return "cpu/" + kernels.GemmName() }

// Device is the host.
func (Backend) Device() device.Device { return device.Device{Kind: device.CPU} }

// SetThreads caps the goroutines one operation uses (kernels.SetThreads, process-wide);
// n ≤ 0 restores GOMAXPROCS. Results never depend on it.
func (Backend) SetThreads(n int) { kernels.SetThreads(n) }

// Alloc returns a zeroed host tensor. Only F32 is supported.
func (Backend) Alloc(n int, dtype device.DType) device.Tensor {
	if dtype != device.F32 {
		panic("device/cpu: only f32 tensors, not " + dtype.String())
	}
	return device.Host(make([]float32, n))
}

func (Backend) CopyFromHost(dst device.Tensor, src []float32) { copyExact(f32(dst), src) }
func (Backend) CopyToHost(dst []float32, src device.Tensor)   { copyExact(dst, f32(src)) }
func (Backend) Copy(dst, src device.Tensor)                   { copyExact(f32(dst), f32(src)) }
func (Backend) Zero(t device.Tensor)                          { clear(f32(t)) }
func (Backend) Sync() error                                   { return nil }

func copyExact(dst, src []float32) {
	if len(dst) != len(src) {
		panic("device/cpu: copy between tensors of different lengths")
	}
	copy(dst, src)
}

func (Backend) Gemm(tA, tB bool, m, n, k int, alpha float32, a device.Tensor, lda int, b device.Tensor, ldb int, beta float32, c device.Tensor, ldc int) {
	kernels.Gemm(tA, tB, m, n, k, alpha, f32(a), lda, f32(b), ldb, beta, f32(c), ldc)
}

func (Backend) MatmulForward(y, x, w, bias device.Tensor, rows, in, out int) {
	yh := f32(y)
	kernels.Gemm(false, false, rows, out, in, 1, f32(x), in, f32(w), out, 0, yh, out)
	if !bias.IsEmpty() {
		kernels.AddBias(yh, rows, out, f32(bias))
	}
}

func (Backend) MatmulBackward(dx, dw, db, dy, x, w device.Tensor, rows, in, out int) {
	dyh := f32(dy)
	kernels.Gemm(true, false, in, out, rows, 1, f32(x), in, dyh, out, 1, f32(dw), out)
	if !db.IsEmpty() {
		kernels.BiasGrad(f32(db), dyh, rows, out)
	}
	if !dx.IsEmpty() {
		kernels.Gemm(false, true, rows, in, out, 1, dyh, out, f32(w), out, 0, f32(dx), in)
	}
}

func (Backend) EmbeddingForward(out, wte, wpe device.Tensor, tokens []int32, T, d int) {
	kernels.EmbeddingForward(f32(out), f32(wte), orNil(wpe), tokens, T, d)
}

func (Backend) EmbeddingBackward(dwte, dwpe, dy device.Tensor, tokens []int32, T, d, V int) {
	kernels.EmbeddingBackward(f32(dwte), orNil(dwpe), f32(dy), tokens, T, d, V)
}

// orNil is t's host elements, nil for an empty tensor.
func orNil(t device.Tensor) []float32 {
	if t.IsEmpty() {
		return nil
	}
	return f32(t)
}

func (Backend) LayerNormForward(y, mean, rstd, x, w, b device.Tensor, rows, n int, eps float32) {
	kernels.LayerNormForward(f32(y), f32(mean), f32(rstd), f32(x), f32(w), f32(b), rows, n, eps)
}

func (Backend) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.Tensor, rows, n int) {
	kernels.LayerNormBackward(f32(dx), f32(dw), f32(db), f32(dy), f32(x), f32(mean), f32(rstd), f32(w), rows, n)
}

func (Backend) GeluForward(y, x device.Tensor)       { kernels.GeluForward(f32(y), f32(x)) }
func (Backend) GeluBackward(dx, x, dy device.Tensor) { kernels.GeluBackward(f32(dx), f32(x), f32(dy)) }

// AttentionSaveLen is B·H·T·T: the CPU keeps the softmax probabilities.
func (Backend) AttentionSaveLen(B, T, H int) int { return B * H * T * T }

func (Backend) AttentionForward(out, save, qkv device.Tensor, B, T, H, hd int) {
	kernels.AttentionForward(f32(out), f32(save), f32(qkv), B, T, H, hd)
}

func (Backend) AttentionBackward(dqkv, dout, save, qkv device.Tensor, B, T, H, hd int) {
	kernels.AttentionBackward(f32(dqkv), f32(dout), f32(save), f32(qkv), B, T, H, hd)
}

func (Backend) GroupedAttentionForward(out, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	kernels.GroupedAttentionForward(f32(out), f32(save), f32(q), f32(k), f32(v), B, T, H, KVH, hd)
}

func (Backend) GroupedAttentionBackward(dq, dk, dv, dout, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	kernels.GroupedAttentionBackward(f32(dq), f32(dk), f32(dv), f32(dout), f32(save), f32(q), f32(k), f32(v), B, T, H, KVH, hd)
}

func (Backend) RMSNormForward(y, rstd, x, w device.Tensor, rows, n int, eps float32) {
	kernels.RMSNormForward(f32(y), f32(rstd), f32(x), f32(w), rows, n, eps)
}

func (Backend) RMSNormBackward(dx, dw, dy, x, rstd, w device.Tensor, rows, n int) {
	kernels.RMSNormBackward(f32(dx), f32(dw), f32(dy), f32(x), f32(rstd), f32(w), rows, n)
}

func (Backend) RopeForward(y, x, cos, sin device.Tensor, rows, T, heads, hd int) {
	kernels.RopeForward(f32(y), f32(x), f32(cos), f32(sin), rows, T, heads, hd)
}

func (Backend) RopeBackward(dx, dy, cos, sin device.Tensor, rows, T, heads, hd int) {
	kernels.RopeBackward(f32(dx), f32(dy), f32(cos), f32(sin), rows, T, heads, hd)
}

func (Backend) SwiGLUForward(h, gate, up device.Tensor) {
	kernels.SwiGLUForward(f32(h), f32(gate), f32(up))
}

func (Backend) SwiGLUBackward(dgate, dup, gate, up, dh device.Tensor) {
	kernels.SwiGLUBackward(f32(dgate), f32(dup), f32(gate), f32(up), f32(dh))
}

func (Backend) CrossEntropy(losses []float64, dlogits, logits device.Tensor, targets []int32, V int, scale float32) {
	var dl []float32
	if !dlogits.IsEmpty() {
		dl = f32(dlogits)
	}
	kernels.CrossEntropy(losses, dl, f32(logits), targets, V, scale)
}

func (Backend) Add(dst, a, b device.Tensor)        { kernels.Add(f32(dst), f32(a), f32(b)) }
func (Backend) Scale(x device.Tensor, s float32)   { kernels.Scale(f32(x), s) }
func (Backend) SumSquares(x device.Tensor) float64 { return kernels.SumSquares(f32(x)) }

func (Backend) AdamWStep(o device.AdamW, p, g, m, v device.Tensor, step int, decay bool) {
	k := kernels.AdamW{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay}
	k.Step(f32(p), f32(g), f32(m), f32(v), step, decay)
}
