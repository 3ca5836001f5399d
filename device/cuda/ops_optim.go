//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"math"
	"unsafe"

	"github.com/meshnode/meshnode/device"
)

// sumSquaresBlocks is the fixed grid of sum_squares_partial: the order of SumSquares's
// additions depends only on the tensor's length, never on the device.
const sumSquaresBlocks = 256

// CrossEntropy: one block per row (cross_entropy); the losses come back as float64.
func (b *Backend) CrossEntropy(losses []float64, dlogits, logits device.Tensor, targets []int32, V int, scale float32) {
	N := len(targets)
	if N == 0 {
		return
	}
	_ = losses[N-1] // a losses slice too short is a programming error, as on the CPU
	if !b.enter() {
		return
	}
	defer b.leave()
	pt := b.int32s(targets)
	var pl, pd uint64
	if sameTensor(dlogits, logits) {
		pl = b.out(logits, N*V)
		pd = pl
	} else {
		pl, pd = b.in(logits, N*V), b.out(dlogits, N*V)
	}
	pLoss := b.hostOut(unsafe.Pointer(&losses[0]), uint64(N)*8)
	b.launch("cross_entropy", N, 1, rowBlock, 1, pLoss, pd, pl, pt, V, scale)
}

// Scale: x = s·x (scale).
func (b *Backend) Scale(x device.Tensor, s float32) {
	n := x.Len()
	if n == 0 || !b.enter() {
		return
	}
	defer b.leave()
	b.launch1D("scale", n, b.out(x, n), s, int64(n))
}

// SumSquares: 256 fixed blocks of float64 partial sums, added on the host in block order.
func (b *Backend) SumSquares(x device.Tensor) float64 {
	n := x.Len()
	if n == 0 || !b.enter() {
		return 0
	}
	defer b.leave()
	b.launch("sum_squares_partial", sumSquaresBlocks, 1, 256, 1, b.partial, b.in(x, n), int64(n))
	var part [sumSquaresBlocks]float64
	b.fail(b.drv.check("cuMemcpyDtoHAsync", b.drv.memcpyDtoHAsync(unsafe.Pointer(&part[0]), b.partial, sumSquaresBlocks*8, b.stream)))
	b.fail(b.drv.check("cuStreamSynchronize", b.drv.streamSynchronize(b.stream)))
	if b.err != nil {
		return math.NaN()
	}
	var s float64
	for _, p := range part {
		s += p
	}
	return s
}

// AdamWStep: one update per element (adamw), the step's constants computed here exactly
// as kernels.AdamW.Step computes them.
func (b *Backend) AdamWStep(o device.AdamW, p, g, m, v device.Tensor, step int, decay bool) {
	n := p.Len()
	if n == 0 || !b.enter() {
		return
	}
	defer b.leave()
	keep := float32(1)
	if decay {
		keep = float32(1 - o.LR*o.WeightDecay)
	}
	stepSize := float32(o.LR / (1 - math.Pow(o.Beta1, float64(step))))
	bc2 := float32(math.Sqrt(1 - math.Pow(o.Beta2, float64(step))))
	pg := b.in(g, n)
	b.launch1D("adamw", n, b.out(p, n), pg, b.out(m, n), b.out(v, n), int64(n), keep,
		float32(o.Beta1), float32(o.Beta2), float32(1-o.Beta1), float32(1-o.Beta2), stepSize, bc2, float32(o.Eps))
}
