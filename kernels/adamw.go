package kernels

import "math"

// AdamW holds the hyper-parameters of decoupled-weight-decay Adam (Loshchilov & Hutter).
type AdamW struct {
	// LR is the learning rate of this step.
	LR float64
	// Beta1 and Beta2 are the moment decay rates (docs/gpt.md: 0.9 and 0.95).
	Beta1, Beta2 float64
	// Eps is added to the denominator (1e-8).
	Eps float64
	// WeightDecay is the decoupled decay, applied only where the caller asks (matrices).
	WeightDecay float64
}

// Step applies one AdamW update, step being the 1-based count of updates so far, to the
// parameters p with gradient g and moments m, v, exactly as PyTorch's AdamW does it in
// float32:
//
//	p ← p·(1 − lr·wd)                      (only when decay is true)
//	m ← β1·m + (1 − β1)·g
//	v ← β2·v + (1 − β2)·g²
//	p ← p − (lr / (1 − β1^step)) · m / (√v / √(1 − β2^step) + eps)
func (o AdamW) Step(p, g, m, v []float32, step int, decay bool) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	keep := float32(1)
	if decay {
		keep = float32(1 - o.LR*o.WeightDecay)
	}
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	c1, c2 := float32(1-o.Beta1), float32(1-o.Beta2)
	stepSize := float32(o.LR / (1 - math.Pow(o.Beta1, float64(step))))
	bc2 := float32(math.Sqrt(1 - math.Pow(o.Beta2, float64(step))))
	eps := float32(o.Eps)
	ParallelFor(n, 1<<13, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			gi := g[i]
			mi := m[i]*b1 + c1*gi
			vi := v[i]*b2 + c2*gi*gi
			m[i], v[i] = mi, vi
			denom := float32(math.Sqrt(float64(vi)))/bc2 + eps
			p[i] = p[i]*keep - stepSize*(mi/denom)
		}
	})
}

// ClipCoefficient is the factor that scales gradients of global norm √sumSquares down to
// maxNorm: min(1, maxNorm/(norm + 1e-6)), as torch.nn.utils.clip_grad_norm_ computes it.
func ClipCoefficient(sumSquares, maxNorm float64) float32 {
	c := maxNorm / (math.Sqrt(sumSquares) + 1e-6)
	return float32(min(c, 1))
}
