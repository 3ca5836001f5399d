package kernels

// vecImpl is one implementation of the vector kernels: GELU forward and backward and the
// shifted exponential of softmax, over n elements, n a multiple of vecBlock (the spans
// below run the tails with the portable loops). A nil function means the portable loop.
// The SIMD paths sum exp's 16 lanes separately (acc[l] = Σ over elements i ≡ l mod 16).
type vecImpl struct {
	name     string
	geluFwd  func(y, x *float32, n int)
	geluBwd  func(dx, x, dy *float32, n int)
	expShift func(dst, src *float32, n int, shift, scale float32, acc *[16]float32)
	addTo    func(dst, src *float32, n int) // n a multiple of 8
}

// vecBlock is the element granule of the SIMD vector kernels: 16 on every path (one zmm,
// or two ymm), so both compute the same elements in SIMD and sum exp in the same order.
const vecBlock = 16

// vecImpls lists the vector kernels usable here, the portable loops first and the one the
// kernels dispatch to last.
func vecImpls() []vecImpl { return append([]vecImpl{{name: "go"}}, archVecImpls()...) }

// vecBest is what GeluForward, GeluBackward, softmax and cross-entropy use.
var vecBest = vecImpls()[len(vecImpls())-1]

// geluForwardSpan is geluForwardGo, vecBlock lanes at a time where SIMD is available.
func geluForwardSpan(y, x []float32) { vecBest.geluForwardSpan(y, x) }

// geluBackwardSpan is geluBackwardGo, vecBlock lanes at a time where SIMD is available.
func geluBackwardSpan(dx, x, dy []float32) { vecBest.geluBackwardSpan(dx, x, dy) }

// expShift is expShiftGo, vecBlock lanes at a time where SIMD is available; the lane
// sums are added in lane order, then the tail's, so the result is deterministic.
func expShift(dst, src []float32, shift, scale float32) float32 {
	return vecBest.expShiftSpan(dst, src, shift, scale)
}

func (v vecImpl) geluForwardSpan(y, x []float32) {
	n := 0
	if v.geluFwd != nil {
		if n = len(y) &^ (vecBlock - 1); n > 0 {
			v.geluFwd(&y[0], &x[0], n)
		}
	}
	geluForwardGo(y[n:], x[n:len(y)])
}

func (v vecImpl) geluBackwardSpan(dx, x, dy []float32) {
	n := 0
	if v.geluBwd != nil {
		if n = len(dx) &^ (vecBlock - 1); n > 0 {
			v.geluBwd(&dx[0], &x[0], &dy[0], n)
		}
	}
	geluBackwardGo(dx[n:], x[n:len(dx)], dy[n:len(dx)])
}

func (v vecImpl) expShiftSpan(dst, src []float32, shift, scale float32) float32 {
	var acc [16]float32
	return v.expShiftAcc(dst, src, shift, scale, &acc)
}

// expShiftAcc is expShiftSpan with the caller's lane sums (overwritten): the SIMD path is
// called through a function value, so an array of expShiftSpan's own escapes to the heap.
func (v vecImpl) expShiftAcc(dst, src []float32, shift, scale float32, acc *[16]float32) float32 {
	n := 0
	var z float32
	if v.expShift != nil {
		if n = len(dst) &^ (vecBlock - 1); n > 0 {
			*acc = [16]float32{}
			v.expShift(&dst[0], &src[0], n, shift, scale, acc)
			for _, a := range acc {
				z += a
			}
		}
	}
	return z + expShiftGo(dst[n:], src[n:len(dst)], shift, scale)
}

// addRow sets dst[j] += src[j] (the inner loop of AddBias and BiasGrad), 8 lanes at a time
// where SIMD is available: one IEEE add per element on every path, so the bits are the same.
func addRow(dst, src []float32) { vecBest.addRow(dst, src) }

func (v vecImpl) addRow(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if v.addTo != nil {
		if n = len(dst) &^ 7; n > 0 {
			v.addTo(&dst[0], &src[0], n)
		}
	}
	for j := n; j < len(dst); j++ {
		dst[j] += src[j]
	}
}
