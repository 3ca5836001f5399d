package kernels

// SwiGLUForward sets h = silu(gate)·up elementwise over h's length, silu(g) = g·σ(g) with
// σ(g) = 1/(1 + e^−g) (Llama's MLP activation); h may be gate or up.
func SwiGLUForward(h, gate, up []float32) {
	_, _ = gate[len(h)-1], up[len(h)-1]
	ParallelFor(len(h), 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g := gate[i]
			h[i] = g * sigmoid(g) * up[i]
		}
	})
}

// SwiGLUBackward propagates dh through SwiGLUForward and overwrites dgate and dup:
// dup = dh·silu(gate), dgate = dh·up·σ(gate)·(1 + gate·(1 − σ(gate))). dgate may be dh.
func SwiGLUBackward(dgate, dup, gate, up, dh []float32) {
	n := len(dh)
	_, _, _, _ = dgate[n-1], dup[n-1], gate[n-1], up[n-1]
	ParallelFor(n, 4096, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			g, u, d := gate[i], up[i], dh[i]
			s := sigmoid(g)
			dup[i] = d * g * s
			dgate[i] = d * u * s * (1 + g*(1-s))
		}
	})
}

// sigmoid is 1/(1 + e^−x) with Expf, the exponential the other activations use.
func sigmoid(x float32) float32 { return 1 / (1 + Expf(-x)) }
