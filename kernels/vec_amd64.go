//go:build amd64 && !noasm

package kernels

import "math"

// geluConsts feeds geluFwdAVX512 and geluBwdAVX512: √(2/π), 0.044715, the tanh clamp ±9,
// the rational tanh's coefficients (A13…A1, B6…B0), 0.5, 1, and 3·0.044715·√(2/π).
var geluConsts = [18]float32{geluC, geluA, tanhMax, -tanhMax,
	tanhA13, tanhA11, tanhA9, tanhA7, tanhA5, tanhA3, tanhA1,
	tanhB6, tanhB4, tanhB2, tanhB0, 0.5, 1, 3 * geluA * geluC}

// expConsts feeds expShiftAVX512: log2(e), ln2 in two parts, the argument range, and the
// Taylor coefficients 1/7! … 1/2, 1.
var expConsts = [13]float32{log2e, ln2Hi, ln2Lo, expMin, expMax,
	1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1}

// geluConsts8 and expConsts8 are the same constants broadcast to 8 lanes for the AVX2
// kernels, which cannot broadcast from memory inside an arithmetic instruction;
// expConsts8's extra last row is the int32 exponent bias 127.
var (
	geluConsts8 = func() (t [18][8]float32) {
		for i, v := range geluConsts {
			t[i] = [8]float32{v, v, v, v, v, v, v, v}
		}
		return t
	}()
	expConsts8 = func() (t [14][8]float32) {
		for i, v := range append(expConsts[:], math.Float32frombits(127)) {
			t[i] = [8]float32{v, v, v, v, v, v, v, v}
		}
		return t
	}()
)

//go:noescape
func geluFwdAVX512(y, x *float32, n int, c *[18]float32)

//go:noescape
func geluBwdAVX512(dx, x, dy *float32, n int, c *[18]float32)

//go:noescape
func expShiftAVX512(dst, src *float32, n int, shift, scale float32, c *[13]float32, acc *[16]float32)

//go:noescape
func geluFwdAVX2(y, x *float32, n int, c *[18][8]float32)

//go:noescape
func geluBwdAVX2(dx, x, dy *float32, n int, c *[18][8]float32)

//go:noescape
func addToAVX2(dst, src *float32, n int)

//go:noescape
func expShiftAVX2(dst, src *float32, n int, shift, scale float32, c *[14][8]float32, acc *[16]float32)

var (
	vecAVX512 = vecImpl{name: "avx512",
		geluFwd: func(y, x *float32, n int) { geluFwdAVX512(y, x, n, &geluConsts) },
		geluBwd: func(dx, x, dy *float32, n int) { geluBwdAVX512(dx, x, dy, n, &geluConsts) },
		expShift: func(dst, src *float32, n int, shift, scale float32, acc *[16]float32) {
			expShiftAVX512(dst, src, n, shift, scale, &expConsts, acc)
		},
		addTo: addToAVX2} // ymm adds: every AVX-512 CPU has AVX2, and one add is one add
	vecAVX2 = vecImpl{name: "avx2",
		geluFwd: func(y, x *float32, n int) { geluFwdAVX2(y, x, n, &geluConsts8) },
		geluBwd: func(dx, x, dy *float32, n int) { geluBwdAVX2(dx, x, dy, n, &geluConsts8) },
		expShift: func(dst, src *float32, n int, shift, scale float32, acc *[16]float32) {
			expShiftAVX2(dst, src, n, shift, scale, &expConsts8, acc)
		},
		addTo: addToAVX2}
)

// archVecImpls lists the SIMD vector kernels this CPU can run (and CPUEnv allows),
// narrowest first.
func archVecImpls() []vecImpl {
	var impls []vecImpl
	if hasAVX2 {
		impls = append(impls, vecAVX2)
	}
	if hasAVX512 {
		impls = append(impls, vecAVX512)
	}
	return impls
}
