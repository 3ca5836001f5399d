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

// Tanhf returns tanh(x) = 1 − 2/(e^{2x}+1) in float32, absolute error below 3e-7.
func Tanhf(x float32) float32 {
	if x > 10 {
		return 1
	}
	if x < -10 {
		return -1
	}
	return 1 - 2/(Expf(2*x)+1)
}
