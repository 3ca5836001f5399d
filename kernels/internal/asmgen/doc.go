// Command asmgen writes the amd64 GEMM microkernels of package kernels
// (gemm_avx512_amd64.s and gemm_avx2_amd64.s), the AVX2 elementwise kernels
// (vec_avx2_amd64.s) and the FMA peak loops of meshnode bench (fma_peak_amd64.s). The
// kernels are fully unrolled register tiles, tedious and error-prone by hand, so they are
// generated from one description.
//
// Run it through `go generate ./kernels` (see gemm_amd64.go); the output is committed.
//
// Both kernels compute one MR×NR tile T = Σ_{p<kc} op(A)[r][p]·B[p][s] with every lane
// of a vector register summing its own element of C in order p = 0, 1, …, so the result of
// an element never depends on the tile it falls in. op(A)[r][p] is read at a + r·rs + p·ps
// (elements), which covers a packed panel (rs 1, ps MR) and both unpacked layouts of A
// (rs lda, ps 1; or rs 1, ps lda). Row p of the B panel is read at b + p·bs. The tile is
// then written to the rows×cols window of C: C = alpha·T (acc = 0) or C += alpha·T.
package main
