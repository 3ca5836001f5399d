//go:build amd64 && !noasm

package kernels

// geluConsts feeds geluFwdAVX512 and geluBwdAVX512: √(2/π), 0.044715, the tanh clamp ±9,
// the rational tanh's coefficients (A13…A1, B6…B0), 0.5, 1, and 3·0.044715·√(2/π).
var geluConsts = [18]float32{geluC, geluA, tanhMax, -tanhMax,
	tanhA13, tanhA11, tanhA9, tanhA7, tanhA5, tanhA3, tanhA1,
	tanhB6, tanhB4, tanhB2, tanhB0, 0.5, 1, 3 * geluA * geluC}

// expConsts feeds expShiftAVX512: log2(e), ln2 in two parts, the argument range, and the
// Taylor coefficients 1/7! … 1/2, 1.
var expConsts = [13]float32{log2e, ln2Hi, ln2Lo, expMin, expMax,
	1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1}

//go:noescape
func geluFwdAVX512(y, x *float32, n int, c *[18]float32)

//go:noescape
func geluBwdAVX512(dx, x, dy *float32, n int, c *[18]float32)

//go:noescape
func expShiftAVX512(dst, src *float32, n int, shift, scale float32, c *[13]float32, acc *[16]float32)

// geluForwardSpan is geluForwardGo, 16 lanes at a time where AVX-512 is available.
func geluForwardSpan(y, x []float32) {
	n := 0
	if hasAVX512 {
		if n = len(y) &^ 15; n > 0 {
			geluFwdAVX512(&y[0], &x[0], n, &geluConsts)
		}
	}
	geluForwardGo(y[n:], x[n:len(y)])
}

// geluBackwardSpan is geluBackwardGo, 16 lanes at a time where AVX-512 is available.
func geluBackwardSpan(dx, x, dy []float32) {
	n := 0
	if hasAVX512 {
		if n = len(dx) &^ 15; n > 0 {
			geluBwdAVX512(&dx[0], &x[0], &dy[0], n, &geluConsts)
		}
	}
	geluBackwardGo(dx[n:], x[n:len(dx)], dy[n:len(dx)])
}

// expShift is expShiftGo, 16 lanes at a time where AVX-512 is available; the lane sums
// are added in lane order, then the tail's, so the result is deterministic.
func expShift(dst, src []float32, shift, scale float32) float32 {
	n := 0
	var z float32
	if hasAVX512 {
		if n = len(dst) &^ 15; n > 0 {
			var acc [16]float32
			expShiftAVX512(&dst[0], &src[0], n, shift, scale, &expConsts, &acc)
			for _, v := range acc {
				z += v
			}
		}
	}
	return z + expShiftGo(dst[n:], src[n:len(dst)], shift, scale)
}
