//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/device"
)

// gemmTile is the side of the C tile one block of gemm_f32 computes (BM = BN in gemm.cu).
const gemmTile = 64

// span is the elements a row-major rows×cols matrix of row stride ld occupies.
func span(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C (device.Backend's specification) with the
// configured GEMM path; A and B of type BF16 (C stays F32) go through cuBLASLt.
func (b *Backend) Gemm(tA, tB bool, m, n, k int, alpha float32, a device.Tensor, lda int, bm device.Tensor, ldb int, beta float32, c device.Tensor, ldc int) {
	if m == 0 || n == 0 || !b.enter() {
		return
	}
	defer b.leave()
	ar, ac, br, bc := m, k, k, n
	if tA {
		ar, ac = k, m
	}
	if tB {
		br, bc = n, k
	}
	if a.DType() != bm.DType() || c.DType() != device.F32 {
		panic("device/cuda: Gemm needs A and B of one type and C of f32")
	}
	pa, pb := b.in(a, span(ar, ac, lda)), b.in(bm, span(br, bc, ldb))
	pc := b.out(c, span(m, n, ldc))
	b.gemm(a.DType(), tA, tB, m, n, k, alpha, pa, lda, pb, ldb, beta, pc, ldc)
}

// gemm is Gemm on device addresses.
func (b *Backend) gemm(dt device.DType, tA, tB bool, m, n, k int, alpha float32, a uint64, lda int, bm uint64, ldb int, beta float32, c uint64, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if dt == device.F32 && (b.cfg.GEMM == GemmKernel || k == 0) {
		if (m+gemmTile-1)/gemmTile > maxGridY {
			b.fail(fmt.Errorf("cuda: GEMM of %d rows: the kernel's grid holds at most %d", m, maxGridY*gemmTile))
			return
		}
		b.launch("gemm_f32", (n+gemmTile-1)/gemmTile, (m+gemmTile-1)/gemmTile, 16, 16, boolInt(tA), boolInt(tB), m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc)
		return
	}
	if b.lt == nil {
		b.fail(errors.Join(errors.New("cuda: a bf16 GEMM needs cuBLASLt"), b.ltErr))
		return
	}
	compute, elem := int32(cublasCompute32F), int32(cudaR32F)
	if b.cfg.GEMM == GemmCublasLtTF32 {
		compute = cublasCompute32FFastTF32
	}
	if dt == device.BF16 {
		elem = cudaR16BF
	}
	if b.err == nil {
		b.fail(b.lt.ltGemm(b.stream, compute, elem, tA, tB, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc))
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// MatmulForward is y = x·W + bias: a GEMM, then the bias added by add_bias.
func (b *Backend) MatmulForward(y, x, w, bias device.Tensor, rows, in, out int) {
	if rows == 0 || out == 0 || !b.enter() {
		return
	}
	defer b.leave()
	px, pw, pb := b.in(x, rows*in), b.in(w, in*out), b.in(bias, out)
	py := b.out(y, rows*out)
	b.gemm(x.DType(), false, false, rows, out, in, 1, px, in, pw, out, 0, py, out)
	if pb != 0 {
		b.launch1D("add_bias", rows*out, py, pb, rows, out)
	}
}

// MatmulBackward is dw += xᵀ·dy, db += Σ_r dy (bias_grad, rows in order), dx = dy·Wᵀ.
func (b *Backend) MatmulBackward(dx, dw, db, dy, x, w device.Tensor, rows, in, out int) {
	if !b.enter() {
		return
	}
	defer b.leave()
	pdy, px, pw := b.in(dy, rows*out), b.in(x, rows*in), b.in(w, in*out)
	pdw, pdb, pdx := b.out(dw, in*out), b.out(db, out), b.out(dx, rows*in)
	b.gemm(x.DType(), true, false, in, out, rows, 1, px, in, pdy, out, 1, pdw, out)
	if pdb != 0 {
		b.launch1D("bias_grad", out, pdb, pdy, rows, out)
	}
	if pdx != 0 {
		b.gemm(dy.DType(), false, true, rows, in, out, 1, pdy, out, pw, out, 0, pdx, in)
	}
}
