package kernels

import "sync"

// Blocking of the pure-Go GEMM: op(B) is packed in kc×nc panels of gemmNR columns, op(A)
// in mc×kc panels of gemmMR rows, and a gemmMR×gemmNR register tile runs over kc. The k
// loop is cut at fixed multiples of goKC, so the summation order of every element of C is
// the same whatever m, n and the caller's split of C.
const (
	gemmMR = 4
	gemmNR = 4
	goKC   = 256
	goMC   = 64
	goNC   = 512
)

var packPool = sync.Pool{New: func() any { s := make([]float32, 0, goKC*(goNC+goMC)); return &s }}

// gemmGo is the portable blocked GEMM: it packs panels of A and B and runs a 4×4 register
// tile. It is the fallback on every architecture and the `noasm` build.
func gemmGo(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	scaleC(m, n, beta, c, ldc)
	if k == 0 || alpha == 0 {
		return
	}
	bufp := packPool.Get().(*[]float32)
	defer packPool.Put(bufp)
	buf := (*bufp)[:cap(*bufp)]
	for jc := 0; jc < n; jc += goNC {
		nc := min(goNC, n-jc)
		for pc := 0; pc < k; pc += goKC {
			kc := min(goKC, k-pc)
			bp := buf[:roundUp(nc, gemmNR)*kc]
			packB(tB, b, ldb, pc, jc, kc, nc, gemmNR, bp)
			for ic := 0; ic < m; ic += goMC {
				mc := min(goMC, m-ic)
				ap := buf[len(bp) : len(bp)+roundUp(mc, gemmMR)*kc]
				packA(tA, a, lda, ic, pc, mc, kc, gemmMR, ap)
				macroGo(mc, nc, kc, alpha, ap, bp, c[ic*ldc+jc:], ldc)
			}
		}
	}
}

func roundUp(x, m int) int { return (x + m - 1) / m * m }

// scaleC sets C = beta·C over the m×n window (C = 0 when beta is 0).
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// packA copies the mc×kc block of op(A) at (ic, pc) into panels of mr rows: panel q holds,
// for each p < kc, the mr values op(A)[ic+q·mr+r][pc+p], zero-padded past mc.
func packA(tA bool, a []float32, lda, ic, pc, mc, kc, mr int, dst []float32) {
	for q := 0; q < mc; q += mr {
		panel := dst[q*kc : (q+mr)*kc]
		rows := min(mr, mc-q)
		for p := 0; p < kc; p++ {
			out := panel[p*mr : p*mr+mr]
			for r := 0; r < rows; r++ {
				if tA {
					out[r] = a[(pc+p)*lda+ic+q+r]
				} else {
					out[r] = a[(ic+q+r)*lda+pc+p]
				}
			}
			clear(out[rows:])
		}
	}
}

// packB copies the kc×nc block of op(B) at (pc, jc) into panels of nr columns: panel q
// holds, for each p < kc, the nr values op(B)[pc+p][jc+q·nr+s], zero-padded past nc.
func packB(tB bool, b []float32, ldb, pc, jc, kc, nc, nr int, dst []float32) {
	for q := 0; q < nc; q += nr {
		panel := dst[q*kc : (q+nr)*kc]
		cols := min(nr, nc-q)
		for p := 0; p < kc; p++ {
			out := panel[p*nr : p*nr+nr]
			if !tB {
				copy(out[:cols], b[(pc+p)*ldb+jc+q:])
			} else {
				for s := 0; s < cols; s++ {
					out[s] = b[(jc+q+s)*ldb+pc+p]
				}
			}
			clear(out[cols:])
		}
	}
}

// macroGo multiplies packed panels: C[mc×nc] += alpha·Ap·Bp.
func macroGo(mc, nc, kc int, alpha float32, ap, bp, c []float32, ldc int) {
	var tile [gemmMR * gemmNR]float32
	for q := 0; q < nc; q += gemmNR {
		bpan := bp[q*kc : (q+gemmNR)*kc]
		cols := min(gemmNR, nc-q)
		for r := 0; r < mc; r += gemmMR {
			micro4x4(kc, ap[r*kc:(r+gemmMR)*kc], bpan, &tile)
			rows := min(gemmMR, mc-r)
			for i := 0; i < rows; i++ {
				crow := c[(r+i)*ldc+q : (r+i)*ldc+q+cols]
				for j := range crow {
					crow[j] += alpha * tile[i*gemmNR+j]
				}
			}
		}
	}
}

// micro4x4 computes the 4×4 tile Σ_p a[p]ᵀ·b[p] of two packed panels.
func micro4x4(kc int, a, b []float32, t *[16]float32) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	a = a[:kc*4]
	b = b[:kc*4]
	for p := 0; p < kc; p++ {
		ap := a[p*4 : p*4+4 : p*4+4]
		bp := b[p*4 : p*4+4 : p*4+4]
		a0, a1, a2, a3 := ap[0], ap[1], ap[2], ap[3]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	*t = [16]float32{c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23, c30, c31, c32, c33}
}
