package devicetest

import (
	"fmt"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cpu"
)

// Emulated is a backend whose tensors are in memory the host reaches only through
// CopyToHost and CopyFromHost, as a GPU's: Tensor.Host is nil for every tensor it
// allocates. It computes with the CPU backend, so its results are the CPU's bits. It lets
// code meant for device backends (explicit copies at the host boundary, views of device
// memory, no Host shortcuts) be tested on machines without a GPU.
//
// It also accepts host tensors as operands, because the model's parameters are host
// tensors until Param holds device tensors (docs/engine.md).
type Emulated struct{ cpu cpu.Backend }

// NewEmulated returns an Emulated backend.
func NewEmulated() Emulated { return Emulated{} }

var _ device.Backend = Emulated{}

// emuMemory is one allocation of emulated device memory.
type emuMemory struct{ data []float32 }

func (*emuMemory) Device() device.Device { return device.Device{Kind: device.Emulated} }

// h is t as a host tensor over its storage, for the CPU backend to compute on.
func (Emulated) h(t device.Tensor) device.Tensor {
	m, off := t.Memory()
	if m == nil {
		return t
	}
	e, ok := m.(*emuMemory)
	if !ok {
		panic(fmt.Sprintf("devicetest: a tensor in %v memory given to the emulated backend", m.Device()))
	}
	return device.Host(e.data[off : off+t.Len() : off+t.Len()])
}

func (Emulated) Name() string          { return "emulated" }
func (Emulated) Device() device.Device { return device.Device{Kind: device.Emulated} }
func (Emulated) Sync() error           { return nil }

func (Emulated) Alloc(n int, dtype device.DType) device.Tensor {
	if dtype != device.F32 {
		panic("devicetest: the emulated backend has only f32 tensors")
	}
	return device.InMemory(&emuMemory{data: make([]float32, n)}, 0, n, dtype)
}

func (e Emulated) CopyFromHost(dst device.Tensor, src []float32) {
	e.cpu.CopyFromHost(e.h(dst), src)
}
func (e Emulated) CopyToHost(dst []float32, src device.Tensor) { e.cpu.CopyToHost(dst, e.h(src)) }
func (e Emulated) Copy(dst, src device.Tensor)                 { e.cpu.Copy(e.h(dst), e.h(src)) }
func (e Emulated) Zero(t device.Tensor)                        { e.cpu.Zero(e.h(t)) }

func (e Emulated) Gemm(tA, tB bool, m, n, k int, alpha float32, a device.Tensor, lda int, b device.Tensor, ldb int, beta float32, c device.Tensor, ldc int) {
	e.cpu.Gemm(tA, tB, m, n, k, alpha, e.h(a), lda, e.h(b), ldb, beta, e.h(c), ldc)
}

func (e Emulated) MatmulForward(y, x, w, bias device.Tensor, rows, in, out int) {
	e.cpu.MatmulForward(e.h(y), e.h(x), e.h(w), e.h(bias), rows, in, out)
}

func (e Emulated) MatmulBackward(dx, dw, db, dy, x, w device.Tensor, rows, in, out int) {
	e.cpu.MatmulBackward(e.h(dx), e.h(dw), e.h(db), e.h(dy), e.h(x), e.h(w), rows, in, out)
}

func (e Emulated) EmbeddingForward(out, wte, wpe device.Tensor, tokens []int32, T, d int) {
	e.cpu.EmbeddingForward(e.h(out), e.h(wte), e.h(wpe), tokens, T, d)
}

func (e Emulated) EmbeddingBackward(dwte, dwpe, dy device.Tensor, tokens []int32, T, d, V int) {
	e.cpu.EmbeddingBackward(e.h(dwte), e.h(dwpe), e.h(dy), tokens, T, d, V)
}

func (e Emulated) LayerNormForward(y, mean, rstd, x, w, b device.Tensor, rows, n int, eps float32) {
	e.cpu.LayerNormForward(e.h(y), e.h(mean), e.h(rstd), e.h(x), e.h(w), e.h(b), rows, n, eps)
}

func (e Emulated) LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w device.Tensor, rows, n int) {
	e.cpu.LayerNormBackward(e.h(dx), e.h(dw), e.h(db), e.h(dy), e.h(x), e.h(mean), e.h(rstd), e.h(w), rows, n)
}

func (e Emulated) GeluForward(y, x device.Tensor)       { e.cpu.GeluForward(e.h(y), e.h(x)) }
func (e Emulated) GeluBackward(dx, x, dy device.Tensor) { e.cpu.GeluBackward(e.h(dx), e.h(x), e.h(dy)) }
func (e Emulated) AttentionSaveLen(B, T, H int) int     { return e.cpu.AttentionSaveLen(B, T, H) }

func (e Emulated) AttentionForward(out, save, qkv device.Tensor, B, T, H, hd int) {
	e.cpu.AttentionForward(e.h(out), e.h(save), e.h(qkv), B, T, H, hd)
}

func (e Emulated) AttentionBackward(dqkv, dout, save, qkv device.Tensor, B, T, H, hd int) {
	e.cpu.AttentionBackward(e.h(dqkv), e.h(dout), e.h(save), e.h(qkv), B, T, H, hd)
}

func (e Emulated) GroupedAttentionForward(out, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	e.cpu.GroupedAttentionForward(e.h(out), e.h(save), e.h(q), e.h(k), e.h(v), B, T, H, KVH, hd)
}

func (e Emulated) GroupedAttentionBackward(dq, dk, dv, dout, save, q, k, v device.Tensor, B, T, H, KVH, hd int) {
	e.cpu.GroupedAttentionBackward(e.h(dq), e.h(dk), e.h(dv), e.h(dout), e.h(save), e.h(q), e.h(k), e.h(v), B, T, H, KVH, hd)
}

func (e Emulated) RMSNormForward(y, rstd, x, w device.Tensor, rows, n int, eps float32) {
	e.cpu.RMSNormForward(e.h(y), e.h(rstd), e.h(x), e.h(w), rows, n, eps)
}

func (e Emulated) RMSNormBackward(dx, dw, dy, x, rstd, w device.Tensor, rows, n int) {
	e.cpu.RMSNormBackward(e.h(dx), e.h(dw), e.h(dy), e.h(x), e.h(rstd), e.h(w), rows, n)
}

func (e Emulated) RopeForward(y, x, cos, sin device.Tensor, rows, T, heads, hd int) {
	e.cpu.RopeForward(e.h(y), e.h(x), e.h(cos), e.h(sin), rows, T, heads, hd)
}

func (e Emulated) RopeBackward(dx, dy, cos, sin device.Tensor, rows, T, heads, hd int) {
	e.cpu.RopeBackward(e.h(dx), e.h(dy), e.h(cos), e.h(sin), rows, T, heads, hd)
}

func (e Emulated) SwiGLUForward(h, gate, up device.Tensor) {
	e.cpu.SwiGLUForward(e.h(h), e.h(gate), e.h(up))
}

func (e Emulated) SwiGLUBackward(dgate, dup, gate, up, dh device.Tensor) {
	e.cpu.SwiGLUBackward(e.h(dgate), e.h(dup), e.h(gate), e.h(up), e.h(dh))
}

func (e Emulated) CrossEntropy(losses []float64, dlogits, logits device.Tensor, targets []int32, V int, scale float32) {
	e.cpu.CrossEntropy(losses, e.h(dlogits), e.h(logits), targets, V, scale)
}

func (e Emulated) Add(dst, a, b device.Tensor)        { e.cpu.Add(e.h(dst), e.h(a), e.h(b)) }
func (e Emulated) Scale(x device.Tensor, s float32)   { e.cpu.Scale(e.h(x), s) }
func (e Emulated) SumSquares(x device.Tensor) float64 { return e.cpu.SumSquares(e.h(x)) }

func (e Emulated) AdamWStep(o device.AdamW, p, g, m, v device.Tensor, step int, decay bool) {
	e.cpu.AdamWStep(o, e.h(p), e.h(g), e.h(m), e.h(v), step, decay)
}
