package devicetest

import "math"

// The float64 references of the device.Backend operations, written straight from their
// specifications, for values and for finite differences. Matrices are row-major.

func refGemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if tA {
					ai = p*lda + i
				}
				if tB {
					bi = j*ldb + p
				}
				av, bv := a[ai], b[bi]
				s += av * bv
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

// refMatmul is y = x·W + bias (bias may be nil).
func refMatmul(x, w, bias []float64, rows, in, out int) []float64 {
	y := make([]float64, rows*out)
	refGemm(false, false, rows, out, in, 1, x, in, w, out, 0, y, out)
	if bias != nil {
		for r := 0; r < rows; r++ {
			for j := 0; j < out; j++ {
				y[r*out+j] += bias[j]
			}
		}
	}
	return y
}

func refEmbedding(wte, wpe []float64, tokens []int32, T, d int) []float64 {
	out := make([]float64, len(tokens)*d)
	for r, tok := range tokens {
		for j := 0; j < d; j++ {
			out[r*d+j] = wte[int(tok)*d+j] + wpe[(r%T)*d+j]
		}
	}
	return out
}

func refLayerNorm(x, w, b []float64, rows, n int, eps float64) (y, mean, rstd []float64) {
	y, mean, rstd = make([]float64, rows*n), make([]float64, rows), make([]float64, rows)
	for r := 0; r < rows; r++ {
		xr := x[r*n : r*n+n]
		var s float64
		for _, v := range xr {
			s += v
		}
		m := s / float64(n)
		var q float64
		for _, v := range xr {
			q += (v - m) * (v - m)
		}
		rs := 1 / math.Sqrt(q/float64(n)+eps)
		for j, v := range xr {
			y[r*n+j] = (v-m)*rs*w[j] + b[j]
		}
		mean[r], rstd[r] = m, rs
	}
	return y, mean, rstd
}

const geluC = 0.7978845608028654 // √(2/π)

func refGelu(x []float64) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = 0.5 * v * (1 + math.Tanh(geluC*(v+0.044715*v*v*v)))
	}
	return y
}

// refAttention is causal multi-head attention over the fused qkv (B·T×3d).
func refAttention(qkv []float64, B, T, H, hd int) []float64 {
	d := H * hd
	out := make([]float64, B*T*d)
	scale := 1 / math.Sqrt(float64(hd))
	at := func(b, t, part, h, c int) float64 { return qkv[(b*T+t)*3*d+part*d+h*hd+c] }
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			for i := 0; i < T; i++ {
				s := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := range s {
					for c := 0; c < hd; c++ {
						s[j] += at(b, i, 0, h, c) * at(b, j, 1, h, c)
					}
					s[j] *= scale
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for c := 0; c < hd; c++ {
					var acc float64
					for j := range s {
						acc += s[j] / z * at(b, j, 2, h, c)
					}
					out[(b*T+i)*d+h*hd+c] = acc
				}
			}
		}
	}
	return out
}

// refCrossEntropy is each row's log Σ exp(logits) − logits[target].
func refCrossEntropy(logits []float64, targets []int32, V int) []float64 {
	losses := make([]float64, len(targets))
	for r, t := range targets {
		row := logits[r*V : r*V+V]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		var z float64
		for _, v := range row {
			z += math.Exp(v - mx)
		}
		losses[r] = mx + math.Log(z) - row[t]
	}
	return losses
}

// refAdamW is one AdamW update in float64 (the backend computes in float32).
func refAdamW(lr, b1, b2, eps, wd float64, p, g, m, v []float64, step int, decay bool) {
	for i := range p {
		if decay {
			p[i] *= 1 - lr*wd
		}
		m[i] = b1*m[i] + (1-b1)*g[i]
		v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		stepSize := lr / (1 - math.Pow(b1, float64(step)))
		denom := math.Sqrt(v[i])/math.Sqrt(1-math.Pow(b2, float64(step))) + eps
		p[i] -= stepSize * m[i] / denom
	}
}
