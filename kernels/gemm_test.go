package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// guardBits marks elements of C that Gemm must never write: a NaN with a recognisable
// payload, compared bit for bit.
const guardBits = 0x7fc0dead

var guardValue = math.Float32frombits(guardBits)

// gemmCase is one conformance case: shapes, transposes, scalars and the padding added to
// each leading dimension beyond its minimum.
type gemmCase struct {
	tA, tB              bool
	m, n, k             int
	alpha, beta         float32
	padA, padB, padC    int
	guardPre, guardPost int
}

func (tc gemmCase) String() string {
	return fmt.Sprintf("tA=%v,tB=%v,m=%d,n=%d,k=%d,alpha=%g,beta=%g,pad=%d/%d/%d",
		tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, tc.beta, tc.padA, tc.padB, tc.padC)
}

// gemmOperands are the inputs of one case: A and B exactly as long as their shape and
// stride require, and C inside a guarded buffer (cBuf[off:]).
type gemmOperands struct {
	a, b          []float32
	lda, ldb, ldc int
	cBuf          []float32
	off           int
}

func (tc gemmCase) operands(rng *rand.Rand) gemmOperands {
	ar, ac := tc.m, tc.k
	if tc.tA {
		ar, ac = tc.k, tc.m
	}
	br, bc := tc.k, tc.n
	if tc.tB {
		br, bc = tc.n, tc.k
	}
	o := gemmOperands{lda: ac + tc.padA, ldb: bc + tc.padB, ldc: tc.n + tc.padC}
	o.a = randMatrix(rng, ar, ac, o.lda)
	o.b = randMatrix(rng, br, bc, o.ldb)
	o.off = tc.guardPre
	o.cBuf = make([]float32, tc.guardPre+matLen(tc.m, tc.n, o.ldc)+tc.guardPost)
	for i := range o.cBuf {
		o.cBuf[i] = guardValue
	}
	for i := 0; i < tc.m; i++ {
		for j := 0; j < tc.n; j++ {
			v := float32(rng.Float64()*2 - 1)
			if tc.beta == 0 {
				v = float32(math.NaN()) // must not be read
			}
			o.cBuf[o.off+i*o.ldc+j] = v
		}
	}
	return o
}

func matLen(rows, cols, ld int) int {
	if rows == 0 || cols == 0 {
		return 0
	}
	return (rows-1)*ld + cols
}

func randMatrix(rng *rand.Rand, rows, cols, ld int) []float32 {
	x := make([]float32, matLen(rows, cols, ld))
	for i := range x {
		x[i] = guardValue // padding between rows: NaN, so reading it would show
	}
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			x[i*ld+j] = float32(rng.Float64()*2 - 1)
		}
	}
	return x
}

// checkGemmCase runs f on the case and compares it with GemmRef: every element of the m×n
// window within a bound scaled by k and the magnitudes involved, every other element of
// C's buffer untouched.
func checkGemmCase(t testing.TB, name string, f gemmFunc, tc gemmCase, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	o := tc.operands(rng)
	got := append([]float32(nil), o.cBuf...)
	f(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, got[o.off:], o.ldc)

	want := append([]float32(nil), o.cBuf...)
	GemmRef(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, want[o.off:], o.ldc)
	// bound = |alpha|·Σ|a||b| + |beta·c|, from the reference on absolute values.
	absA, absB := absOf(o.a), absOf(o.b)
	bound := make([]float32, len(o.cBuf))
	for i, v := range o.cBuf {
		if tc.beta != 0 && !isGuard(v) {
			bound[i] = float32(math.Abs(float64(tc.beta * v)))
		}
	}
	GemmRef(tc.tA, tc.tB, tc.m, tc.n, tc.k, float32(math.Abs(float64(tc.alpha))), absA, o.lda, absB, o.ldb, 1, bound[o.off:], o.ldc)

	inWindow := func(idx int) bool {
		r := idx - o.off
		return r >= 0 && r < matLen(tc.m, tc.n, o.ldc) && r%o.ldc < tc.n
	}
	tol := 2 * float64(tc.k+2) * 0x1p-23
	bad := 0
	for i := range got {
		if !inWindow(i) {
			if math.Float32bits(got[i]) != math.Float32bits(o.cBuf[i]) {
				t.Errorf("%s %v: wrote outside C's window at buffer index %d (offset %d): %v", name, tc, i, i-o.off, got[i])
				return
			}
			continue
		}
		diff := math.Abs(float64(got[i] - want[i]))
		if !(diff <= tol*float64(bound[i])+1e-30) {
			if bad++; bad <= 3 {
				r := i - o.off
				t.Errorf("%s %v: C[%d][%d] = %v, want %v (tolerance %.3g)", name, tc, r/o.ldc, r%o.ldc, got[i], want[i], tol*float64(bound[i]))
			}
		}
	}
}

func isGuard(v float32) bool { return math.Float32bits(v) == guardBits }

func absOf(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		if !isGuard(v) {
			y[i] = float32(math.Abs(float64(v)))
		}
	}
	return y
}

// conformanceCases is the shared suite: size sweeps over 0..70 in each dimension (odd and
// even, around every register tile), a grid of tile-edge sizes, strided operands, scalar
// variations and, unless -short, the shapes training uses.
func conformanceCases(short bool) []gemmCase {
	var cases []gemmCase
	scalars := [][2]float32{{1, 0}, {1, 1}, {0.5, -1.5}, {-2, 0}, {0, 2}, {1, 0.25}}
	i := 0
	add := func(tA, tB bool, m, n, k int) {
		s := scalars[i%len(scalars)]
		pad := []int{0, 3, 0, 17}[i%4]
		cases = append(cases, gemmCase{tA: tA, tB: tB, m: m, n: n, k: k, alpha: s[0], beta: s[1],
			padA: pad, padB: (pad * 2) % 7, padC: pad + i%2, guardPre: 5, guardPost: 9})
		i++
	}
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			step := 1
			if short {
				step = 3
			}
			for d := 0; d <= 70; d += step {
				add(tA, tB, d, 37, 19)
				add(tA, tB, 29, d, 23)
				add(tA, tB, 17, 33, d)
			}
			edges := []int{1, 2, 5, 6, 7, 13, 14, 15, 16, 17, 28, 31, 32, 33, 47, 64}
			if short {
				edges = []int{1, 6, 14, 15, 31, 33}
			}
			for _, m := range edges {
				for _, n := range edges {
					add(tA, tB, m, n, 1+(m*n)%40)
				}
			}
			if !short {
				for _, s := range [][3]int{
					{128, 128, 32}, {128, 32, 128}, {257, 45, 300}, {30, 1100, 9}, {63, 70, 513},
					{512, 128, 128}, {128, 384, 128}, {64, 1030, 64}, {200, 96, 256},
				} {
					add(tA, tB, s[0], s[1], s[2])
				}
			}
		}
	}
	return cases
}

// TestGemmConformance runs the shared suite on every implementation, serially, and on the
// parallel Gemm with one and two threads (its split lowered so that small cases split too).
func TestGemmConformance(t *testing.T) {
	cases := conformanceCases(testing.Short())
	for _, impl := range GemmImpls() {
		if impl.Name == "ref" {
			continue
		}
		t.Run(impl.Name, func(t *testing.T) {
			t.Parallel()
			for i, tc := range cases {
				checkGemmCase(t, impl.Name, impl.Serial, tc, uint64(i))
			}
		})
	}
	t.Run("Gemm", func(t *testing.T) {
		defer withGemmThreads(t, 2)()
		for _, threads := range []int{1, 2} {
			SetThreads(threads)
			for i, tc := range cases {
				checkGemmCase(t, fmt.Sprintf("Gemm(threads=%d)", threads), Gemm, tc, uint64(i))
			}
		}
	})
}

// withGemmThreads lets Gemm split even small products over up to procs goroutines, and
// returns the function that restores the defaults.
func withGemmThreads(t testing.TB, procs int) func() {
	oldProcs := runtime.GOMAXPROCS(max(procs, runtime.GOMAXPROCS(0)))
	oldMin := gemmParallelMinWork
	gemmParallelMinWork = 0
	return func() {
		runtime.GOMAXPROCS(oldProcs)
		gemmParallelMinWork = oldMin
		SetThreads(0)
	}
}

func TestGemmBitIdenticalAcrossThreads(t *testing.T) {
	defer withGemmThreads(t, 2)()
	shapes := [][3]int{{70, 45, 300}, {29, 131, 40}, {512, 128, 128}, {128, 512, 257}, {3, 200, 17}}
	for si, s := range shapes {
		for form := 0; form < 4; form++ {
			tc := gemmCase{tA: form&1 != 0, tB: form&2 != 0, m: s[0], n: s[1], k: s[2], alpha: 0.75, beta: 1, padA: 1, padB: 2, padC: 3}
			o := tc.operands(rand.New(rand.NewPCG(uint64(si), uint64(form))))
			var results [2][]float32
			for i, threads := range []int{1, 2} {
				SetThreads(threads)
				results[i] = append([]float32(nil), o.cBuf...)
				Gemm(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, results[i], o.ldc)
			}
			assertSameBits(t, tc.String(), results[0], results[1])
		}
	}
}

// TestGemmSplitInvariance checks, for every implementation, that computing C in four
// blocks cut at arbitrary rows and columns gives the bits of one call: the summation order
// of an element does not depend on m, n or where it sits in the tile grid.
func TestGemmSplitInvariance(t *testing.T) {
	for _, impl := range GemmImpls() {
		for form := 0; form < 4; form++ {
			tc := gemmCase{tA: form&1 != 0, tB: form&2 != 0, m: 45, n: 77, k: 530, alpha: 1.5, beta: 0.5, padA: 2, padB: 1, padC: 4}
			o := tc.operands(rand.New(rand.NewPCG(3, uint64(form))))
			whole := append([]float32(nil), o.cBuf...)
			impl.Serial(tc.tA, tc.tB, tc.m, tc.n, tc.k, tc.alpha, o.a, o.lda, o.b, o.ldb, tc.beta, whole, o.ldc)
			parts := append([]float32(nil), o.cBuf...)
			for _, rr := range [][2]int{{0, 7}, {7, tc.m}} {
				for _, cc := range [][2]int{{0, 19}, {19, tc.n}} {
					aOff, bOff := rr[0]*o.lda, cc[0]
					if tc.tA {
						aOff = rr[0]
					}
					if tc.tB {
						bOff = cc[0] * o.ldb
					}
					impl.Serial(tc.tA, tc.tB, rr[1]-rr[0], cc[1]-cc[0], tc.k, tc.alpha, o.a[aOff:], o.lda, o.b[bOff:], o.ldb,
						tc.beta, parts[rr[0]*o.ldc+cc[0]:], o.ldc)
				}
			}
			assertSameBits(t, impl.Name+" "+tc.String(), whole, parts)
		}
	}
}

func assertSameBits(t *testing.T, name string, x, y []float32) {
	t.Helper()
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			t.Errorf("%s: results differ at %d: %v vs %v", name, i, x[i], y[i])
			return
		}
	}
}

func TestGemmImplsOrder(t *testing.T) {
	impls := GemmImpls()
	if impls[0].Name != "ref" || impls[1].Name != "go" {
		t.Fatalf("GemmImpls() starts %q, %q; want ref, go", impls[0].Name, impls[1].Name)
	}
	if got, want := impls[len(impls)-1].Name, GemmName(); got != want {
		t.Errorf("last of GemmImpls() is %q, but Gemm dispatches to %q", got, want)
	}
}

func TestGemmPanicsOnShortSlices(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"short A", func() {
			Gemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		}},
		{"short C", func() {
			Gemm(false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		}},
		{"bad ldb", func() {
			GemmSerial(false, true, 2, 3, 2, 1, make([]float32, 4), 2, make([]float32, 6), 1, 0, make([]float32, 6), 3)
		}},
		{"negative", func() { Gemm(false, false, -1, 2, 2, 1, nil, 2, nil, 2, 0, nil, 2) }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			tc.f()
		}()
	}
}

// FuzzGemm compares Gemm and every implementation with GemmRef on fuzzed shapes, forms,
// strides and scalars.
func FuzzGemm(f *testing.F) {
	f.Add(uint8(0), uint8(14), uint8(32), uint8(8), uint8(0), uint8(1), uint64(1))
	f.Add(uint8(3), uint8(15), uint8(33), uint8(1), uint8(5), uint8(0), uint64(2))
	f.Add(uint8(1), uint8(1), uint8(1), uint8(0), uint8(2), uint8(2), uint64(3))
	f.Add(uint8(2), uint8(47), uint8(6), uint8(200), uint8(7), uint8(3), uint64(4))
	scalars := [][2]float32{{1, 0}, {1, 1}, {-0.5, 2}, {3, 0}}
	f.Fuzz(func(t *testing.T, form, m, n, k, pad, sc uint8, seed uint64) {
		s := scalars[int(sc)%len(scalars)]
		tc := gemmCase{tA: form&1 != 0, tB: form&2 != 0, m: int(m) % 80, n: int(n) % 80, k: int(k) % 300,
			alpha: s[0], beta: s[1], padA: int(pad) % 5, padB: int(pad/5) % 5, padC: int(pad/25) % 5, guardPre: 3, guardPost: 3}
		for _, impl := range GemmImpls()[1:] {
			checkGemmCase(t, impl.Name, impl.Serial, tc, seed)
		}
		checkGemmCase(t, "Gemm", Gemm, tc, seed)
	})
}

func TestGemmSplitRows(t *testing.T) {
	for _, tc := range []struct {
		tm, tn, threads int
		rows            bool
	}{
		{147, 4, 2, true},  // tall training product: rows, though columns split as evenly
		{1, 64, 2, false},  // one tile high: only columns can split
		{3, 64, 2, false},  // 2+1 tiles of rows against 32+32 columns
		{10, 10, 2, true},  // even either way
		{64, 3, 4, true},   // 16 tiles each in rows against 1 column each of 64
		{5, 100, 4, false}, // 2 of 5 rows per goroutine against 25 of 100 columns
	} {
		if got := splitRows(tc.tm, tc.tn, tc.threads); got != tc.rows {
			t.Errorf("splitRows(%d, %d, %d) = %v, want %v", tc.tm, tc.tn, tc.threads, got, tc.rows)
		}
	}
}
