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

// UpdateBound is B(step), the most that one coordinate of Adam's bias-corrected update
// m̂/(√v̂ + ε) can reach at the step-th update (1-based), whatever the gradients were:
// clipped, zero, or of any scale. With m and v started at zero,
//
//	m_t = (1−β1)·Σ_{k<t} β1^k·g_{t−k},   v_t = (1−β2)·Σ_{k<t} β2^k·g²_{t−k},
//
// and Cauchy–Schwarz on β1^k·|g| = (β1/√β2)^k · (√β2^k·|g|) gives
// |m_t| ≤ (1−β1)·√(Σ_{k<t} (β1²/β2)^k)·√(v_t/(1−β2)), so
//
//	|m̂_t/(√v̂_t + ε)| ≤ |m_t|/(1−β1^t) · √(1−β2^t)/√v_t
//	                 ≤ (1−β1)/(1−β1^t) · √(1−β2^t)/√(1−β2) · √(Σ_{k<t} (β1²/β2)^k) = B(t).
//
// ε ≥ 0 only lowers the update. At (0.9, 0.95) B(1) = 1 and B grows to ≈ 1.165; where
// β1² ≥ β2 the sum grows with t and so does B, without limit. Step moves a parameter
// by at most LR·(B(step) + wd·|p|) (wd only where it decays), before float32 rounding.
// Hyper-parameters for which no bound holds (β1 outside [0, 1), β2 outside (0, 1),
// ε < 0) or step < 1 give +Inf.
func (o AdamW) UpdateBound(step int) float64 {
	b1, b2 := o.Beta1, o.Beta2
	if !(b1 >= 0 && b1 < 1 && b2 > 0 && b2 < 1 && o.Eps >= 0) || step < 1 {
		return math.Inf(1)
	}
	t := float64(step)
	r := b1 * b1 / b2
	sum := t // Σ_{k<t} r^k at r = 1
	if r != 1 {
		sum = -math.Expm1(t*math.Log(r)) / (1 - r) // (1 − r^t)/(1 − r), accurate near r = 1; 1 at β1 = 0
	}
	return (1 - b1) / -math.Expm1(t*math.Log(b1)) * math.Sqrt(-math.Expm1(t*math.Log(b2))/(1-b2)) * math.Sqrt(sum)
}
