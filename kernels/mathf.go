package kernels

import "math"

// Constants of the float32 exponential: x = n·ln2 + r with |r| ≤ ln2/2, ln2 split in a
// high part exact in float32 and a low correction (Cody–Waite).
const (
	log2e  = 1.44269504088896341
	ln2Hi  = 0.693359375
	ln2Lo  = -2.12194440e-4
	expMax = 88.3762626647949
	expMin = -87.3365447505531
)

// Expf returns e^x in float32 with a relative error below 2·2⁻²³ over its whole range:
// +Inf above ~88.38, 0 below ~-87.34, NaN for NaN. It is the one exponential that softmax,
// cross-entropy and GELU use, so that every backend rounds alike.
func Expf(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > expMax:
		return float32(math.Inf(1))
	case x < expMin:
		return 0
	}
	n := float32(math.Floor(float64(x*log2e + 0.5)))
	r := x - n*ln2Hi - n*ln2Lo
	// Taylor series to r⁷/7!: truncation below 1e-8 relative for |r| ≤ 0.347.
	p := float32(1.0 / 5040)
	p = p*r + 1.0/720
	p = p*r + 1.0/120
	p = p*r + 1.0/24
	p = p*r + 1.0/6
	p = p*r + 0.5
	p = p*r + 1
	p = p*r + 1
	e := int32(n)
	if e > 127 {
		return p * math.Float32frombits(uint32(127+127)<<23) * 2
	}
	return p * math.Float32frombits(uint32(e+127)<<23)
}

// Coefficients of Eigen's rational approximation tanh(x) ≈ x·P(x²)/Q(x²) on [-9, 9]
// (absolute error below 4e-7 in float32). The SIMD kernels use the same polynomials.
const (
	tanhA1  = 4.89352455891786e-03
	tanhA3  = 6.37261928875436e-04
	tanhA5  = 1.48572235717979e-05
	tanhA7  = 5.12229709037114e-08
	tanhA9  = -8.60467152213735e-11
	tanhA11 = 2.00018790482477e-13
	tanhA13 = -2.76076847742355e-16
	tanhB0  = 4.89352518554385e-03
	tanhB2  = 2.26843463243900e-03
	tanhB4  = 1.18534705686654e-04
	tanhB6  = 1.19825839466702e-06
	tanhMax = 9
)

// Tanhf returns tanh(x) in float32 with an absolute error below 4e-7, as x·P(x²)/Q(x²)
// with x clamped to [-9, 9] (beyond which tanh rounds to ±1).
func Tanhf(x float32) float32 {
	x = min(max(x, -tanhMax), tanhMax)
	x2 := x * x
	p := float32(tanhA13)
	p = p*x2 + tanhA11
	p = p*x2 + tanhA9
	p = p*x2 + tanhA7
	p = p*x2 + tanhA5
	p = p*x2 + tanhA3
	p = p*x2 + tanhA1
	q := float32(tanhB6)
	q = q*x2 + tanhB4
	q = q*x2 + tanhB2
	q = q*x2 + tanhB0
	return x * p / q
}
