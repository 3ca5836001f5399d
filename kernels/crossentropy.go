package kernels

import "math"

// crossEntropyRowRef is the specification of CrossEntropy for one row of V logits:
//
//	loss = log Σ_j exp(logits[j]) − logits[target]
//	dlogits[j] = (softmax(logits)[j] − [j == target])·scale
func crossEntropyRowRef(dlogits, logits []float32, target int32, scale float32) float64 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var z float64
	for _, v := range logits {
		z += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(z)
	if dlogits != nil {
		for j, v := range logits {
			p := math.Exp(float64(v) - lse)
			if int32(j) == target {
				p--
			}
			dlogits[j] = float32(p) * scale
		}
	}
	return lse - float64(logits[target])
}

// CrossEntropy computes the softmax cross-entropy of each row of the N×V matrix logits
// against targets (see crossEntropyRowRef), writing row r's loss to losses[r]. When dlogits
// is not nil it also writes the gradient of Σ_r scale·loss[r] there; dlogits may alias
// logits.
func CrossEntropy(losses []float64, dlogits, logits []float32, targets []int32, V int, scale float32) {
	ParallelFor(len(targets), rowGrain, func(lo, hi int) {
		var scratch []float32
		if dlogits == nil {
			scratch = make([]float32, V)
		}
		for r := lo; r < hi; r++ {
			row := logits[r*V : r*V+V]
			mx := row[0]
			for _, v := range row[1:] {
				mx = max(mx, v)
			}
			t := targets[r]
			xt := row[t]
			dr := scratch
			if dlogits != nil {
				dr = dlogits[r*V : r*V+V]
			}
			// dr = exp(logits − max): softmax up to the factor 1/z.
			z := expShift(dr, row, mx, 1)
			lse := mx + float32(math.Log(float64(z)))
			losses[r] = float64(lse - xt)
			if dlogits == nil {
				continue
			}
			k := scale / z
			for j := range dr {
				dr[j] *= k
			}
			dr[t] -= scale
		}
	})
}
