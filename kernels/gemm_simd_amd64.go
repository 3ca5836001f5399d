//go:build amd64 && !noasm

package kernels

import "sync"

// Blocking of the SIMD GEMMs. The k loop is cut at fixed multiples of simdKC starting at
// p = 0, and within a block every element of C is summed in order p by one vector lane, so
// the summation order of an element never depends on m, n or the caller's split of C.
//
// For each kc×nc block of op(B) (packed into panels of NR columns, ~1 MiB: it stays in L2)
// the driver walks the row panels of op(A), MR rows at a time, read in place (an MR×kc
// micro-panel, ≤ 14 KiB, stays in L1 while it meets every panel of B).
const (
	simdKC = 256
	simdNC = 1024
	// avx2NC is the AVX2 kernel's block width: a 256×avx2NC block of B (512 KiB) leaves
	// room in a 1 MiB L2 (Zen 4, recent Intel client cores) for op(A) and C, where the
	// 1 MiB block of simdNC would spill to L3.
	avx2NC = 512
	// directBMaxRows: below this many rows of C, an untransposed B is read in place
	// instead of being packed, since packing would not be repaid.
	directBMaxRows = 64
	// packAMinCols: from this many columns of C in a block, each MR×kc micro-panel of
	// op(A) is copied to a contiguous buffer before it meets the panels of B. In place, its
	// k steps (transposed A: one row of A each) or its rows lie lda apart and, with lda a
	// multiple of 1 KiB, crowd a few L1 sets and evict each other; the copy is a handful of
	// memmoves, repaid when reused. An untransposed A has only MR such rows, each read
	// sequentially, so it is copied only when reused across many more panels.
	packAMinCols  = 128
	packAMinColsN = 512
)

// simdTileFunc runs a microkernel on one tile of C; see gemmKernel14x32.
type simdTileFunc func(kc int, a *float32, rs, ps int, b *float32, bs int, c *float32, ldc, rows, cols int, acc int, alpha float32)

// simdKernel describes one microkernel: its register tile (mr×nr) and entry point.
type simdKernel struct {
	name   string
	mr, nr int
	nc     int // columns of a packed block of op(B): simdNC or less for a smaller L2
	tile   simdTileFunc
}

// simdPool holds the packing buffers of the SIMD GEMMs, grown to the largest block used.
var simdPool = sync.Pool{New: func() any { return new([]float32) }}

func getSIMDBuf(n int) *[]float32 {
	p := simdPool.Get().(*[]float32)
	if cap(*p) < n {
		*p = make([]float32, n)
	}
	*p = (*p)[:n]
	return p
}

// simdCall is one serial SIMD GEMM in progress: the operands and its packing buffers.
type simdCall struct {
	kr            *simdKernel
	tA, tB        bool
	m             int
	alpha         float32
	a, b, c       []float32
	lda, ldb, ldc int
	bPanels       []float32 // a packed kc×nc block of op(B)
	aPanel        []float32 // one copied MR×kc micro-panel of op(A)
	directB       bool      // read whole panels of an untransposed B in place
}

// gemmSIMD is the blocked GEMM around a SIMD microkernel. Its contract is Gemm's.
//
// C is first set to beta·C (skipped for beta 1; for beta 0 the first k block overwrites C
// without reading it). Then, for each k block in order, C += alpha·(that block's partial
// product), computed tile by tile.
func gemmSIMD(kr *simdKernel, tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scaleC(m, n, beta, c, ldc)
		return
	}
	accFirst := 1
	switch beta {
	case 0:
		accFirst = 0
	case 1:
	default:
		scaleC(m, n, beta, c, ldc)
	}
	ncMax, kcMax := min(kr.nc, roundUp(n, kr.nr)), min(simdKC, k)
	bufp := getSIMDBuf(ncMax*kcMax + kr.mr*kcMax)
	g := simdCall{kr: kr, tA: tA, tB: tB, m: m, alpha: alpha, a: a, b: b, c: c, lda: lda, ldb: ldb, ldc: ldc,
		bPanels: (*bufp)[:ncMax*kcMax], aPanel: (*bufp)[ncMax*kcMax:], directB: !tB && m < directBMaxRows}
	for jc := 0; jc < n; jc += kr.nc {
		nc := min(kr.nc, n-jc)
		for pc := 0; pc < k; pc += simdKC {
			acc := 1
			if pc == 0 {
				acc = accFirst
			}
			g.block(jc, pc, nc, min(simdKC, k-pc), acc)
		}
	}
	simdPool.Put(bufp)
}

// block adds alpha·op(A)[:, pc:pc+kc]·op(B)[pc:pc+kc, jc:jc+nc] to C's columns jc…jc+nc
// (or overwrites them when acc is 0): it packs the block of op(B), then runs every row
// panel of op(A) against every column panel of it.
func (g *simdCall) block(jc, pc, nc, kc, acc int) {
	mr, nr := g.kr.mr, g.kr.nr
	full := nc // columns read in place when directB
	if g.directB {
		full = nc / nr * nr
		if full < nc {
			packB(false, g.b, g.ldb, pc, jc+full, kc, nc-full, nr, g.bPanels[full*kc:])
		}
	} else {
		packBSIMD(g.tB, g.b, g.ldb, pc, jc, kc, nc, nr, g.bPanels)
	}
	copyA := nc >= min(packAMinColsN, g.kr.nc) || (g.tA && nc >= packAMinCols)
	for ir := 0; ir < g.m; ir += mr {
		rows := min(mr, g.m-ir)
		ap, rs, ps := g.aPanelAt(ir, pc, kc, rows, copyA)
		crow := g.c[ir*g.ldc+jc:]
		for jr := 0; jr < nc; jr += nr {
			bp, bs := &g.bPanels[jr*kc], nr
			if g.directB && jr < full {
				bp, bs = &g.b[pc*g.ldb+jc+jr], g.ldb
			}
			g.kr.tile(kc, ap, rs, ps, bp, bs, &crow[jr], g.ldc, rows, min(nr, nc-jr), acc, g.alpha)
		}
	}
}

// aPanelAt locates the rows×kc micro-panel of op(A) at (ir, pc) for the kernel: in place,
// or copied to aPanel (always for a short edge panel, whose missing rows read as zeros).
func (g *simdCall) aPanelAt(ir, pc, kc, rows int, copyA bool) (ap *float32, rs, ps int) {
	switch {
	case rows < g.kr.mr || copyA:
		rs, ps = copyAPanel(g.tA, g.a, g.lda, ir, pc, rows, kc, g.kr.mr, g.aPanel)
		return &g.aPanel[0], rs, ps
	case g.tA:
		return &g.a[pc*g.lda+ir], 1, g.lda
	default:
		return &g.a[ir*g.lda+pc], g.lda, 1
	}
}

// packBSIMD packs the kc×nc block of op(B) at (pc, jc) into panels of nr columns, as packB
// does, with SIMD packs for whole panels (nr 32 means the AVX-512 kernel, 16 the AVX2 one).
func packBSIMD(tB bool, b []float32, ldb, pc, jc, kc, nc, nr int, dst []float32) {
	full := nc / nr * nr
	switch {
	case !tB && nr == 32:
		for q := 0; q < full; q += nr {
			gemmPackB32(kc, &b[pc*ldb+jc+q], ldb, &dst[q*kc])
		}
	case !tB && nr == 16:
		for q := 0; q < full; q += nr {
			gemmPackB16(kc, &b[pc*ldb+jc+q], ldb, &dst[q*kc])
		}
	case !tB:
		for p := 0; p < kc; p++ {
			src := b[(pc+p)*ldb+jc : (pc+p)*ldb+jc+full]
			for q := 0; q < full; q += nr {
				copy(dst[q*kc+p*nr:q*kc+p*nr+nr], src[q:q+nr])
			}
		}
	case nr == 32:
		for q := 0; q < full; q += nr {
			gemmPackBT32(kc, &b[(jc+q)*ldb+pc], ldb, &dst[q*kc])
		}
	default:
		kc8 := 0
		if nr == 16 {
			kc8 = kc &^ 7
		}
		for q := 0; q < full; q += nr {
			panel := dst[q*kc : q*kc+kc*nr]
			if kc8 > 0 {
				gemmPackBT16(kc8, &b[(jc+q)*ldb+pc], ldb, &panel[0])
			}
			for s := 0; s < nr; s++ {
				src := b[(jc+q+s)*ldb+pc+kc8 : (jc+q+s)*ldb+pc+kc]
				for p, v := range src {
					panel[(kc8+p)*nr+s] = v
				}
			}
		}
	}
	if full < nc {
		packB(tB, b, ldb, pc, jc+full, kc, nc-full, nr, dst[full*kc:])
	}
}

// copyAPanel copies the rows×kc block of op(A) at (ir, pc) to dst without transposing it,
// zero-filling rows rows..mr-1, and returns the strides (rs, ps) at which the kernel
// finds op(A)[r][p] in dst: rows of kc values for an untransposed A, k steps of mr values
// for a transposed one.
func copyAPanel(tA bool, a []float32, lda, ir, pc, rows, kc, mr int, dst []float32) (rs, ps int) {
	if !tA {
		for r := 0; r < rows; r++ {
			copy(dst[r*kc:r*kc+kc], a[(ir+r)*lda+pc:])
		}
		clear(dst[rows*kc : mr*kc])
		return kc, 1
	}
	switch {
	case rows == 14 && mr == 14:
		for p := 0; p < kc; p++ { // fixed-size moves: no memmove call per k step
			*(*[14]float32)(dst[p*14:]) = *(*[14]float32)(a[(pc+p)*lda+ir:])
		}
	case rows == 6 && mr == 6:
		for p := 0; p < kc; p++ {
			*(*[6]float32)(dst[p*6:]) = *(*[6]float32)(a[(pc+p)*lda+ir:])
		}
	default:
		for p := 0; p < kc; p++ {
			d := dst[p*mr : p*mr+mr]
			copy(d[:rows], a[(pc+p)*lda+ir:])
			clear(d[rows:])
		}
	}
	return 1, mr
}
