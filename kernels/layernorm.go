package kernels

import "math"

// LayerNormEps is GPT-2's LayerNorm epsilon.
const LayerNormEps = 1e-5

// layerNormRowRef is the specification of LayerNormForward for one row of n values:
//
//	mean = Σ x / n;  var = Σ (x − mean)² / n;  rstd = 1/√(var + eps)
//	y[j] = (x[j] − mean)·rstd·w[j] + b[j]
func layerNormRowRef(y, x, w, b []float32, eps float32) (mean, rstd float32) {
	n := len(x)
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	m := s / float64(n)
	var q float64
	for _, v := range x {
		q += (float64(v) - m) * (float64(v) - m)
	}
	r := 1 / math.Sqrt(q/float64(n)+float64(eps))
	for j, v := range x {
		y[j] = float32((float64(v)-m)*r)*w[j] + b[j]
	}
	return float32(m), float32(r)
}

// LayerNormForward normalises each of the rows of the rows×n matrix x into y (see
// layerNormRowRef) and stores each row's mean and rstd for the backward pass.
func LayerNormForward(y, mean, rstd, x, w, b []float32, rows, n int, eps float32) {
	w, b = w[:n], b[:n]
	ParallelFor(rows, rowGrain, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr := x[r*n : r*n+n]
			var s float32
			for _, v := range xr {
				s += v
			}
			m := s / float32(n)
			var q float32
			for _, v := range xr {
				d := v - m
				q += d * d
			}
			rs := float32(1 / math.Sqrt(float64(q/float32(n)+eps)))
			yr := y[r*n : r*n+n]
			for j, v := range xr {
				yr[j] = (v-m)*rs*w[j] + b[j]
			}
			mean[r], rstd[r] = m, rs
		}
	})
}

// LayerNormBackward propagates dy through LayerNormForward. With x̂ = (x − mean)·rstd and
// g = dy·w, for each row:
//
//	dx[j] += rstd·(g[j] − mean(g) − x̂[j]·mean(g·x̂))
//
// and over all rows dw[j] += Σ_r dy[r][j]·x̂[r][j], db[j] += Σ_r dy[r][j] (summed in row
// order). dx, dw and db are accumulated into, not overwritten.
func LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w []float32, rows, n int) {
	w = w[:n]
	ParallelFor(rows, rowGrain, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*n:r*n+n], dy[r*n:r*n+n], dx[r*n:r*n+n]
			m, rs := mean[r], rstd[r]
			var sg, sgx float32
			for j, v := range xr {
				g := dyr[j] * w[j]
				sg += g
				sgx += g * (v - m) * rs
			}
			sg /= float32(n)
			sgx /= float32(n)
			for j, v := range xr {
				xh := (v - m) * rs
				dxr[j] += rs * (dyr[j]*w[j] - sg - xh*sgx)
			}
		}
	})
	ParallelFor(n, 64, func(lo, hi int) {
		accW := make([]float32, hi-lo)
		accB := make([]float32, hi-lo)
		copy(accW, dw[lo:hi])
		copy(accB, db[lo:hi])
		for r := 0; r < rows; r++ {
			m, rs := mean[r], rstd[r]
			xr, dyr := x[r*n+lo:r*n+hi], dy[r*n+lo:r*n+hi]
			for j, v := range xr {
				accW[j] += dyr[j] * (v - m) * rs
				accB[j] += dyr[j]
			}
		}
		copy(dw[lo:hi], accW)
		copy(db[lo:hi], accB)
	})
}
