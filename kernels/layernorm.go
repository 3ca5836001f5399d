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
			m := rowSum(xr) / float32(n)
			q := rowSqDev(xr, m)
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
			sg, sgx := rowGradSums(xr, dyr, w, m, rs)
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

// The row reductions of LayerNorm sum in four interleaved partial sums (elements j ≡ 0…3
// mod 4, then ((s0 + s1) + (s2 + s3)) + the tail in order): four independent chains of
// additions instead of one keep the FP adders busy. The order is fixed, so the result
// depends neither on the thread count nor on the CPU.

// rowSum returns Σ x[j].
func rowSum(x []float32) float32 {
	var s0, s1, s2, s3 float32
	j := 0
	for ; j+4 <= len(x); j += 4 {
		v := x[j : j+4 : j+4]
		s0 += v[0]
		s1 += v[1]
		s2 += v[2]
		s3 += v[3]
	}
	s := (s0 + s1) + (s2 + s3)
	for ; j < len(x); j++ {
		s += x[j]
	}
	return s
}

// rowSqDev returns Σ (x[j] − m)².
func rowSqDev(x []float32, m float32) float32 {
	var s0, s1, s2, s3 float32
	j := 0
	for ; j+4 <= len(x); j += 4 {
		v := x[j : j+4 : j+4]
		d0, d1, d2, d3 := v[0]-m, v[1]-m, v[2]-m, v[3]-m
		s0 += d0 * d0
		s1 += d1 * d1
		s2 += d2 * d2
		s3 += d3 * d3
	}
	s := (s0 + s1) + (s2 + s3)
	for ; j < len(x); j++ {
		d := x[j] - m
		s += d * d
	}
	return s
}

// rowGradSums returns Σ g[j] and Σ g[j]·x̂[j] with g = dy·w and x̂ = (x − m)·rs.
func rowGradSums(x, dy, w []float32, m, rs float32) (sg, sgx float32) {
	dy, w = dy[:len(x)], w[:len(x)]
	var g0, g1, g2, g3, h0, h1, h2, h3 float32
	j := 0
	for ; j+4 <= len(x); j += 4 {
		xv, dv, wv := x[j:j+4:j+4], dy[j:j+4:j+4], w[j:j+4:j+4]
		a0, a1, a2, a3 := dv[0]*wv[0], dv[1]*wv[1], dv[2]*wv[2], dv[3]*wv[3]
		g0 += a0
		g1 += a1
		g2 += a2
		g3 += a3
		h0 += a0 * (xv[0] - m) * rs
		h1 += a1 * (xv[1] - m) * rs
		h2 += a2 * (xv[2] - m) * rs
		h3 += a3 * (xv[3] - m) * rs
	}
	sg, sgx = (g0+g1)+(g2+g3), (h0+h1)+(h2+h3)
	for ; j < len(x); j++ {
		a := dy[j] * w[j]
		sg += a
		sgx += a * (x[j] - m) * rs
	}
	return sg, sgx
}
