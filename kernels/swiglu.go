package kernels

import "sync"

// swigluSpan is how many elements SwiGLU's kernels take e^−gate of at once: the
// exponentials go through expShift (SIMD where the CPU has it) into a pooled buffer,
// then the products are formed in order.
const swigluSpan = 256

// swigluBufs holds those buffers: the vector path is called through a function value, so a
// buffer declared in the loop would escape to the heap on every call.
var swigluBufs = sync.Pool{New: func() any { return new(swigluBuf) }}

// swigluBuf is one block's exponentials and expShift's lane sums.
type swigluBuf struct {
	e   [swigluSpan]float32
	acc [16]float32
}

// SwiGLUForward sets h = silu(gate)·up elementwise over h's length, silu(g) = g·σ(g) with
// σ(g) = 1/(1 + e^−g) (Llama's MLP activation); h may be gate or up.
func SwiGLUForward(h, gate, up []float32) {
	_, _ = gate[len(h)-1], up[len(h)-1]
	ParallelFor(len(h), 4096, func(lo, hi int) {
		buf := swigluBufs.Get().(*swigluBuf)
		defer swigluBufs.Put(buf)
		for i0 := lo; i0 < hi; i0 += swigluSpan {
			i1 := min(hi, i0+swigluSpan)
			e := buf.negExp(gate[i0:i1])
			g, u, y := gate[i0:i1], up[i0:i1], h[i0:i1]
			for j, ej := range e {
				gj := g[j]
				y[j] = gj * (1 / (1 + ej)) * u[j]
			}
		}
	})
}

// SwiGLUBackward propagates dh through SwiGLUForward and overwrites dgate and dup:
// dup = dh·silu(gate), dgate = dh·up·σ(gate)·(1 + gate·(1 − σ(gate))). dgate may be dh.
func SwiGLUBackward(dgate, dup, gate, up, dh []float32) {
	n := len(dh)
	_, _, _, _ = dgate[n-1], dup[n-1], gate[n-1], up[n-1]
	ParallelFor(n, 4096, func(lo, hi int) {
		buf := swigluBufs.Get().(*swigluBuf)
		defer swigluBufs.Put(buf)
		for i0 := lo; i0 < hi; i0 += swigluSpan {
			i1 := min(hi, i0+swigluSpan)
			e := buf.negExp(gate[i0:i1])
			for j, ej := range e {
				i := i0 + j
				g, u, d := gate[i], up[i], dh[i]
				s := 1 / (1 + ej)
				dup[i] = d * g * s
				dgate[i] = d * u * s * (1 + g*(1-s))
			}
		}
	})
}

// negExp sets the buffer's first len(g) ≤ swigluSpan exponentials to e^−g[j] through
// expShift and returns them.
func (b *swigluBuf) negExp(g []float32) []float32 {
	e := b.e[:len(g)]
	for j, v := range g {
		e[j] = -v
	}
	vecBest.expShiftAcc(e, e, 0, 1, &b.acc)
	return e
}
