package kernels

import "math"

// rowGrain is the fewest rows a goroutine gets in row-parallel elementwise kernels.
const rowGrain = 16

// AddBias adds bias (length n) to every row of the rows×n matrix y:
//
//	y[r][j] += bias[j]
func AddBias(y []float32, rows, n int, bias []float32) {
	bias = bias[:n]
	ParallelFor(rows, rowGrain*4, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			addRow(y[r*n:r*n+n], bias)
		}
	})
}

// BiasGrad accumulates the column sums of the rows×n matrix dy into db:
//
//	db[j] += Σ_r dy[r][j]   (summed in order r = 0, 1, …)
//
// Work is split over columns, so the order, and the result, do not depend on threads.
func BiasGrad(db, dy []float32, rows, n int) {
	db = db[:n]
	ParallelFor(n, 64, func(lo, hi int) {
		acc := make([]float32, hi-lo)
		copy(acc, db[lo:hi])
		for r := 0; r < rows; r++ {
			addRow(acc, dy[r*n+lo:r*n+hi])
		}
		copy(db[lo:hi], acc)
	})
}

// Add sets dst[i] = a[i] + b[i]; dst may alias a or b.
func Add(dst, a, b []float32) {
	n := len(dst)
	a, b = a[:n], b[:n]
	ParallelFor(n, 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = a[i] + b[i]
		}
	})
}

// AddTo sets dst[i] += x[i].
func AddTo(dst, x []float32) { Add(dst, dst, x) }

// Scale sets x[i] *= s.
func Scale(x []float32, s float32) {
	ParallelFor(len(x), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] *= s
		}
	})
}

// SumSquares returns Σ x[i]² accumulated in float64, in fixed chunks of 4096 summed in
// order, so the result does not depend on the number of threads.
func SumSquares(x []float32) float64 {
	const chunk = 4096
	nc := (len(x) + chunk - 1) / chunk
	parts := make([]float64, nc)
	ParallelFor(nc, 8, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			var s float64
			for _, v := range x[c*chunk : min(len(x), (c+1)*chunk)] {
				s += float64(v) * float64(v)
			}
			parts[c] = s
		}
	})
	var s float64
	for _, p := range parts {
		s += p
	}
	return s
}

// GELU constants: the tanh approximation √(2/π)·(x + 0.044715·x³).
const (
	geluC = 0.7978845608028654 // √(2/π)
	geluA = 0.044715
)

// geluRef is the specification of GeluForward:
//
//	y = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
func geluRef(x float32) float32 {
	u := float64(x)
	return float32(0.5 * u * (1 + math.Tanh(geluC*(u+geluA*u*u*u))))
}

// geluGradRef is the specification of GeluBackward's derivative:
//
//	d/dx gelu(x) = 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²),  t = tanh(…)
func geluGradRef(x float32) float32 {
	u := float64(x)
	t := math.Tanh(geluC * (u + geluA*u*u*u))
	return float32(0.5*(1+t) + 0.5*u*(1-t*t)*geluC*(1+3*geluA*u*u))
}

// GeluForward sets y[i] = gelu(x[i]) (tanh approximation, see geluRef); y may alias x.
func GeluForward(y, x []float32) {
	n := len(y)
	x = x[:n]
	parallelBlocks(n, func(lo, hi int) { geluForwardSpan(y[lo:hi], x[lo:hi]) })
}

// GeluBackward sets dx[i] = dy[i]·gelu'(x[i]) (see geluGradRef); dx may alias dy.
func GeluBackward(dx, x, dy []float32) {
	n := len(dx)
	x, dy = x[:n], dy[:n]
	parallelBlocks(n, func(lo, hi int) { geluBackwardSpan(dx[lo:hi], x[lo:hi], dy[lo:hi]) })
}

// parallelBlocks is ParallelFor over [0, n) for the vector kernels, with every range but
// the last a whole number of vecBlock elements: each element is then computed by the same
// code (SIMD body or scalar tail) whatever the thread count, so the bits do not change.
func parallelBlocks(n int, f func(lo, hi int)) {
	ParallelFor((n+vecBlock-1)/vecBlock, (1<<13)/vecBlock, func(lo, hi int) {
		f(lo*vecBlock, min(hi*vecBlock, n))
	})
}

// geluForwardGo is the portable GeluForward loop over one span.
func geluForwardGo(y, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		t := Tanhf(geluC * (v + geluA*v*v*v))
		y[i] = 0.5 * v * (1 + t)
	}
}

// geluBackwardGo is the portable GeluBackward loop over one span.
func geluBackwardGo(dx, x, dy []float32) {
	x, dy = x[:len(dx)], dy[:len(dx)]
	for i, v := range x {
		t := Tanhf(geluC * (v + geluA*v*v*v))
		g := 0.5*(1+t) + 0.5*v*(1-t*t)*geluC*(1+3*geluA*v*v)
		dx[i] = dy[i] * g
	}
}

// expShiftGo sets dst[i] = exp(src[i] − shift)·scale and returns Σ exp(src[i] − shift),
// summed in order; dst may alias src.
func expShiftGo(dst, src []float32, shift, scale float32) float32 {
	src = src[:len(dst)]
	var z float32
	for i, v := range src {
		e := Expf(v - shift)
		z += e
		dst[i] = e * scale
	}
	return z
}
