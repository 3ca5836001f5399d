package kernels

import (
	"fmt"
	"sync"
)

// gemmFunc is the signature every GEMM implementation shares; see Gemm for the contract.
type gemmFunc func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// GemmImpl names one GEMM implementation, so that tests and benchmarks can run every
// backend through the same conformance suite.
type GemmImpl struct {
	// Name identifies the backend: "ref", "go", "avx2", "avx512".
	Name string
	// Serial computes Gemm on the calling goroutine only.
	Serial func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	// tileM×tileN is the register tile; parallel splits of C align to it (1×1 if unset).
	tileM, tileN int
}

// GemmImpls lists the implementations usable on this machine, the reference first and the
// one Gemm dispatches to last.
func GemmImpls() []GemmImpl {
	impls := []GemmImpl{{Name: "ref", Serial: GemmRef}, {Name: "go", Serial: gemmGo, tileM: gemmMR, tileN: gemmNR}}
	return append(impls, archGemmImpls()...)
}

// gemmBestImpl is what Gemm and GemmSerial dispatch to: the last of GemmImpls(), the
// widest SIMD kernel the CPU supports or else the portable blocked GEMM.
var (
	gemmBestImpl = GemmImpls()[len(GemmImpls())-1]
	gemmBest     = gemmBestImpl.Serial
)

// GemmName names the implementation Gemm and GemmSerial dispatch to on this machine and
// build: "avx512", "avx2" or "go".
func GemmName() string { return gemmBestImpl.Name }

// Gemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices, spreading the work
// over up to Threads() goroutines.
//
// op(A) is m×k: A is stored m×k with row stride lda ≥ k when tA is false, or k×m with
// lda ≥ m when tA is true (then op(A) = Aᵀ). Likewise op(B) is k×n: B is k×n with
// ldb ≥ n, or n×k with ldb ≥ k when tB is true. C is m×n with ldc ≥ n. When beta is 0, C's
// prior contents are not read (NaNs there do not propagate). Elements of C outside the
// m×n window, and the padding between rows, are never written.
//
// GemmRef is the specification. Implementations may sum the k products in another order
// (blocked, vectorised), so results agree with it to float32 rounding, not bit for bit; but
// the order never depends on m, n or the thread count, so splitting C between goroutines
// does not change a single bit of the result. Gemm panics if a slice is too short for its
// shape and stride, as a programming error.
func Gemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	gemmThreads(gemmBestImpl, Threads(), tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// gemmParallelMinWork is the number of multiply-adds below which Gemm stays on the calling
// goroutine: under ~2 M (about 20 µs on one AVX-512 core) waking a second goroutine costs
// more than it saves, the more so on a busy machine. Tests lower it.
var gemmParallelMinWork = 1 << 21

// gemmThreads is Gemm through impl on up to threads goroutines. C is cut into contiguous
// bands of whole register tiles (rows or columns), one band per goroutine; each band is an
// independent product, so no reduction is ever split and the result is the same for any
// thread count.
func gemmThreads(impl GemmImpl, threads int, tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	// Emulated slow devices (testnet), charged by the goroutines the product ran on; free
	// otherwise.
	mark, parts := slowdownStart(), 1
	defer func() { slowdownEnd(mark, parts) }()
	if threads <= 1 || k == 0 || m*n*k < gemmParallelMinWork {
		impl.Serial(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	tileM, tileN := max(impl.tileM, 1), max(impl.tileN, 1)
	tm, tn := (m+tileM-1)/tileM, (n+tileN-1)/tileN
	if splitRows(tm, tn, threads) {
		parts = min(threads, tm)
		parallelBands(tm, threads, func(lo, hi int) {
			i0, i1 := lo*tileM, min(hi*tileM, m)
			aOff := i0 * lda
			if tA {
				aOff = i0
			}
			impl.Serial(tA, tB, i1-i0, n, k, alpha, a[aOff:], lda, b, ldb, beta, c[i0*ldc:], ldc)
		})
		return
	}
	parts = min(threads, tn)
	parallelBands(tn, threads, func(lo, hi int) {
		j0, j1 := lo*tileN, min(hi*tileN, n)
		bOff := j0
		if tB {
			bOff = j0 * ldb
		}
		impl.Serial(tA, tB, m, j1-j0, k, alpha, a, lda, b[bOff:], ldb, beta, c[j0:], ldc)
	})
}

// splitRows chooses between cutting C into bands of rows (tm tiles high) or of columns
// (tn tiles wide) over threads goroutines: rows, unless a split into columns leaves the
// busiest goroutine clearly (>12%) fewer tiles. A band of rows reads only its own rows of
// op(A) and packs all of op(B), which is the smaller operand in training's tall products.
func splitRows(tm, tn, threads int) bool {
	rowLoad := ((tm + threads - 1) / threads) * tn // tiles of the busiest goroutine
	colLoad := ((tn + threads - 1) / threads) * tm
	return 8*rowLoad <= 9*colLoad
}

// parallelBands calls f over min(threads, tiles) contiguous ranges of [0, tiles), one per
// goroutine (the last on the caller's), and returns when all are done.
func parallelBands(tiles, threads int, f func(lo, hi int)) {
	parts := min(threads, tiles)
	if parts <= 1 {
		f(0, tiles)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts-1; p++ {
		lo, hi := tiles*p/parts, tiles*(p+1)/parts
		wg.Go(func() { f(lo, hi) })
	}
	f(tiles*(parts-1)/parts, tiles)
	wg.Wait()
}

// GemmSerial is Gemm on the calling goroutine only, for callers that already run many
// small products in parallel (attention heads).
func GemmSerial(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(tA, tB, m, n, k, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	gemmBest(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// GemmRef is the reference GEMM and the specification of Gemm:
//
//	for i < m, j < n:
//		s := Σ_{p<k} op(A)[i][p]·op(B)[p][j]   (summed in order p = 0, 1, …)
//		C[i][j] = alpha·s + beta·C[i][j]         (just alpha·s when beta == 0)
func GemmRef(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if tA {
					ai = p*lda + i
				}
				if tB {
					bi = j*ldb + p
				}
				s += a[ai] * b[bi]
			}
			if beta == 0 {
				c[i*ldc+j] = alpha * s
			} else {
				c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
			}
		}
	}
}

// checkGemm panics unless every operand is long enough for its shape and stride.
func checkGemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("kernels: Gemm: negative size m=%d n=%d k=%d", m, n, k))
	}
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	checkMatrix("A", ar, ac, a, lda)
	checkMatrix("B", br, bc, b, ldb)
	checkMatrix("C", m, n, c, ldc)
}

func checkMatrix(name string, rows, cols int, x []float32, ld int) {
	if rows == 0 || cols == 0 {
		return
	}
	if ld < cols {
		panic(fmt.Sprintf("kernels: Gemm: %s stride %d < %d columns", name, ld, cols))
	}
	if need := (rows-1)*ld + cols; len(x) < need {
		panic(fmt.Sprintf("kernels: Gemm: %s has %d elements, %d×%d with stride %d needs %d", name, len(x), rows, cols, ld, need))
	}
}
