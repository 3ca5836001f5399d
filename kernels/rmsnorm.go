package kernels

import "math"

// RMSNormForward normalises each row of the rows×n matrix x by its root mean square
// (Llama's RMSNorm): rstd = 1/√(Σx²/n + eps), y = x·rstd·w, and keeps each row's rstd
// for the backward pass. The sum of squares is taken in float32 in column order, as
// PyTorch's x.pow(2).mean(-1) does for a row that fits one reduction.
func RMSNormForward(y, rstd, x, w []float32, rows, n int, eps float32) {
	_ = y[rows*n-1]
	_ = x[rows*n-1]
	_ = rstd[rows-1]
	_ = w[n-1]
	ParallelFor(rows, rowGrain, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*n:r*n+n], y[r*n:r*n+n]
			var ss float32
			for _, v := range xr {
				ss += v * v
			}
			rs := float32(1 / math.Sqrt(float64(ss/float32(n)+eps)))
			rstd[r] = rs
			for j, v := range xr {
				yr[j] = w[j] * (v * rs)
			}
		}
	})
}

// RMSNormBackward propagates dy through RMSNormForward: it accumulates dx += ∂L/∂x and
// dw += ∂L/∂w. With g = dy⊙w and x̂ = x·rstd per row,
//
//	dx = rstd·(g − x̂·Σ(g⊙x̂)/n);  dw[j] += Σ_r dy[r][j]·x̂[r][j]  (rows in order)
func RMSNormBackward(dx, dw, dy, x, rstd, w []float32, rows, n int) {
	_ = dx[rows*n-1]
	_ = dy[rows*n-1]
	_ = x[rows*n-1]
	_ = rstd[rows-1]
	_, _ = w[n-1], dw[n-1]
	// dx by rows, dw by columns (each column sums its rows in order): neither depends on
	// the thread count.
	ParallelFor(rows, rowGrain, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*n:r*n+n], dy[r*n:r*n+n], dx[r*n:r*n+n]
			rs := rstd[r]
			var dot float32
			for j, v := range xr {
				dot += dyr[j] * w[j] * (v * rs)
			}
			dot /= float32(n)
			for j, v := range xr {
				dxr[j] += rs * (dyr[j]*w[j] - (v*rs)*dot)
			}
		}
	})
	ParallelFor(n, 64, func(lo, hi int) {
		acc := make([]float32, hi-lo)
		copy(acc, dw[lo:hi])
		for r := 0; r < rows; r++ {
			rs := rstd[r]
			xr, dyr := x[r*n+lo:r*n+hi], dy[r*n+lo:r*n+hi]
			for j, v := range xr {
				acc[j] += dyr[j] * (v * rs)
			}
		}
		copy(dw[lo:hi], acc)
	})
}
