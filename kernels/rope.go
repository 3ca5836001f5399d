package kernels

import "math"

// RopeTables returns the T×(hd/2) cosines and sines of rotary position embeddings with
// base theta: for position t and pair i, the angle t·θ^(−2i/hd), computed in float64 and
// rounded once.
func RopeTables(T, hd int, theta float64) (cos, sin []float32) {
	half := hd / 2
	cos, sin = make([]float32, T*half), make([]float32, T*half)
	for t := 0; t < T; t++ {
		for i := 0; i < half; i++ {
			a := float64(t) * math.Pow(theta, -float64(2*i)/float64(hd))
			cos[t*half+i], sin[t*half+i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
	}
	return cos, sin
}

// RopeForward rotates each head of each row of x (rows×(heads·hd), row r at position
// r mod T) by the rotary position embedding in Hugging Face's rotate_half convention: the
// head's first and second halves are the pair's two coordinates,
//
//	y[i]      = x[i]·cos − x[i+hd/2]·sin
//	y[i+hd/2] = x[i+hd/2]·cos + x[i]·sin      (cos, sin of position t, pair i; i < hd/2)
//
// cos and sin are RopeTables' (at least T·hd/2 each); hd is even; y may be x.
func RopeForward(y, x, cos, sin []float32, rows, T, heads, hd int) {
	rope(y, x, cos, sin, rows, T, heads, hd, 1)
}

// RopeBackward propagates dy through RopeForward: the inverse rotation (the angle
// negated), dx[i] = dy[i]·cos + dy[i+hd/2]·sin, dx[i+hd/2] = dy[i+hd/2]·cos − dy[i]·sin.
// dx is overwritten and may be dy.
func RopeBackward(dx, dy, cos, sin []float32, rows, T, heads, hd int) {
	rope(dx, dy, cos, sin, rows, T, heads, hd, -1)
}

func rope(y, x, cos, sin []float32, rows, T, heads, hd int, sign float32) {
	half, d := hd/2, heads*hd
	_ = x[rows*d-1]
	_ = y[rows*d-1]
	ParallelFor(rows, rowGrain, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := r % T
			c, s := cos[t*half:t*half+half], sin[t*half:t*half+half]
			for h := 0; h < heads; h++ {
				xa, xb := x[r*d+h*hd:r*d+h*hd+half], x[r*d+h*hd+half:r*d+h*hd+hd]
				ya, yb := y[r*d+h*hd:r*d+h*hd+half], y[r*d+h*hd+half:r*d+h*hd+hd]
				for i := range half {
					a, b, si := xa[i], xb[i], sign*s[i]
					ya[i] = a*c[i] - b*si
					yb[i] = b*c[i] + a*si
				}
			}
		}
	})
}
