//go:build amd64 && !noasm

package kernels

//go:generate go run ./internal/asmgen -out .

// gemmKernel14x32 is the AVX-512 microkernel (gemm_avx512_amd64.s): it sums the 14×32 tile
// Σ_{p<kc} op(A)[r][p]·B[p][s], reading op(A)[r][p] at a + r·rs + p·ps and B[p][s] at
// b + p·bs + s, and writes the rows×(mask0, mask1) window of C at c (row stride ldc):
// C = alpha·T when acc is 0, C += alpha·T otherwise. kc ≥ 1 and 1 ≤ rows ≤ 14.
//
//go:noescape
func gemmKernel14x32(kc int, a *float32, rs, ps int, b *float32, bs int, c *float32, ldc int, rows int, mask0, mask1 int, acc int, alpha float32)

// gemmKernel6x16 is the AVX2+FMA microkernel (gemm_avx2_amd64.s), the same contract on a
// 6×16 tile; maskp points at 16 lane masks (-1 for a valid column, 0 otherwise).
//
//go:noescape
func gemmKernel6x16(kc int, a *float32, rs, ps int, b *float32, bs int, c *float32, ldc int, rows int, maskp *int32, acc int, alpha float32)

// gemmPackBT32 packs one 32-column panel of op(B) = Bᵀ with AVX-512: for p < kc and
// s < 32, dst[p·32+s] = b[s·ldb+p]. kc ≥ 1.
//
//go:noescape
func gemmPackBT32(kc int, b *float32, ldb int, dst *float32)

// gemmPackB32 packs one 32-column panel of an untransposed op(B) = B with AVX-512: for
// p < kc, dst[p·32+s] = b[p·ldb+s], s < 32. kc ≥ 1.
//
//go:noescape
func gemmPackB32(kc int, b *float32, ldb int, dst *float32)

// gemmPackB16 packs one 16-column panel of an untransposed op(B) = B with AVX2: for
// p < kc, dst[p·16+s] = b[p·ldb+s], s < 16. kc ≥ 1.
//
//go:noescape
func gemmPackB16(kc int, b *float32, ldb int, dst *float32)

// gemmPackBT16 packs one 16-column panel of op(B) = Bᵀ with AVX2: for p < kc and s < 16,
// dst[p·16+s] = b[s·ldb+p]. kc is a positive multiple of 8.
//
//go:noescape
func gemmPackBT16(kc int, b *float32, ldb int, dst *float32)

// avx2Masks[n] holds n lane masks of -1 followed by zeros: the valid columns of a tile
// that is n columns wide.
var avx2Masks = func() (m [17][16]int32) {
	for n := range m {
		for s := 0; s < n; s++ {
			m[n][s] = -1
		}
	}
	return m
}()

// avx512Tile runs the AVX-512 kernel on one tile of C.
func avx512Tile(kc int, a *float32, rs, ps int, b *float32, bs int, c *float32, ldc, rows, cols int, acc int, alpha float32) {
	m0 := 1<<min(cols, 16) - 1
	m1 := 1<<max(cols-16, 0) - 1
	gemmKernel14x32(kc, a, rs, ps, b, bs, c, ldc, rows, m0, m1, acc, alpha)
}

// avx2Tile runs the AVX2 kernel on one tile of C.
func avx2Tile(kc int, a *float32, rs, ps int, b *float32, bs int, c *float32, ldc, rows, cols int, acc int, alpha float32) {
	gemmKernel6x16(kc, a, rs, ps, b, bs, c, ldc, rows, &avx2Masks[cols][0], acc, alpha)
}

var (
	avx512Kernel = &simdKernel{name: "avx512", mr: 14, nr: 32, nc: simdNC, tile: avx512Tile}
	avx2Kernel   = &simdKernel{name: "avx2", mr: 6, nr: 16, nc: avx2NC, tile: avx2Tile}
)

func gemmAVX512(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmSIMD(avx512Kernel, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func gemmAVX2(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gemmSIMD(avx2Kernel, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// archGemmImpls lists the amd64 SIMD GEMMs this CPU can run, narrowest first.
func archGemmImpls() []GemmImpl {
	var impls []GemmImpl
	if hasAVX2 {
		impls = append(impls, GemmImpl{Name: "avx2", Serial: gemmAVX2, tileM: avx2Kernel.mr, tileN: avx2Kernel.nr})
	}
	if hasAVX512 {
		impls = append(impls, GemmImpl{Name: "avx512", Serial: gemmAVX512, tileM: avx512Kernel.mr, tileN: avx512Kernel.nr})
	}
	return impls
}
