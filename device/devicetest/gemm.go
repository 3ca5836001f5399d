package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// gemmSizes are (m, n, k): ones, primes, non-multiples of 8 and 16, a k past 256 (where
// a blocked kernel cuts the sum), and shapes thin in every direction.
var gemmSizes = [][3]int{{1, 1, 1}, {1, 17, 3}, {7, 5, 13}, {2, 1, 31}, {31, 33, 29}, {67, 3, 130}, {5, 300, 257}, {16, 32, 8}}

// TestGemm checks Gemm in all four transposition forms against the reference, with
// padded strides, alpha ≠ 1 and beta ∈ {0, 0.5, 1}: with beta 0 C starts as NaN (its
// prior contents must not be read), and the padding between C's rows must stay as it
// was.
func TestGemm(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, sz := range gemmSizes {
		for form := range 4 {
			for _, beta := range []float32{0, 0.5, 1} {
				m, n, k := sz[0], sz[1], sz[2]
				tA, tB := form&1 != 0, form&2 != 0
				t.Run(name("%dx%dx%d/tA=%v,tB=%v/beta=%v", m, n, k, tA, tB, beta), func(t *testing.T) {
					gemmCase(t, be, rng, tA, tB, m, n, k, -0.75, beta)
				})
			}
		}
	}
}

func gemmCase(t *testing.T, be device.Backend, rng *rand.Rand, tA, tB bool, m, n, k int, alpha, beta float32) {
	ar, ac, br, bc := m, k, k, n
	if tA {
		ar, ac = k, m
	}
	if tB {
		br, bc = n, k
	}
	lda, ldb, ldc := ac+3, bc+1, n+2
	a, b := randn(rng, ar*lda, 1), randn(rng, br*ldb, 1)
	c := randn(rng, m*ldc, 1)
	for i := range c {
		if beta == 0 || i%ldc >= n {
			c[i] = guard // never read when beta is 0; padding never written
		}
	}
	want := f64(c)
	refGemm(tA, tB, m, n, k, float64(alpha), f64(a), lda, f64(b), ldb, float64(beta), want, ldc)
	ar2 := newArena(t, be)
	ct := ar2.out("c", c)
	be.Gemm(tA, tB, m, n, k, alpha, ar2.in("a", a), lda, ar2.in("b", b), ldb, beta, ct, ldc)
	ar2.check()
	got := ar2.get(ct)
	for i := range got {
		if i%ldc >= n {
			if math.Float32bits(got[i]) != guardBits {
				t.Fatalf("c[%d][%d], padding between rows, was written: %v", i/ldc, i%ldc, got[i])
			}
			got[i], want[i] = 0, 0
		}
	}
	closeTo(t, "c", got, want, 2e-6*float64(k+4))
}

// matmulSizes are (rows, in, out).
var matmulSizes = [][3]int{{1, 1, 1}, {5, 3, 17}, {17, 19, 1}, {67, 13, 35}, {2, 130, 7}}

// TestMatmul checks the linear layer's forward pass (with and without bias) against the
// reference, and its backward pass against finite differences: dx overwritten, dw and db
// accumulated onto what they held, each of dx and db skipped when empty.
func TestMatmul(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(2, 1))
	for _, sz := range matmulSizes {
		for _, withBias := range []bool{true, false} {
			rows, in, out := sz[0], sz[1], sz[2]
			t.Run(name("%dx%d->%d/bias=%v", rows, in, out, withBias), func(t *testing.T) {
				matmulCase(t, be, rng, rows, in, out, withBias)
			})
		}
	}
}

func matmulCase(t *testing.T, be device.Backend, rng *rand.Rand, rows, in, out int, withBias bool) {
	x, w, bias := randn(rng, rows*in, 1), randn(rng, in*out, 0.5), randn(rng, out, 1)
	var bias64 []float64
	if withBias {
		bias64 = f64(bias)
	}
	ar := newArena(t, be)
	y := ar.out("y", randn(rng, rows*out, 1))
	xt, wt := ar.in("x", x), ar.in("w", w)
	bt := device.Tensor{}
	if withBias {
		bt = ar.in("bias", bias)
	}
	be.MatmulForward(y, xt, wt, bt, rows, in, out)
	ar.check()
	tol := 2e-6 * float64(in+4)
	closeTo(t, "y", ar.get(y), refMatmul(f64(x), f64(w), bias64, rows, in, out), tol)

	dy := randn(rng, rows*out, 1)
	dw0, db0 := randn(rng, in*out, 0.5), randn(rng, out, 0.5)
	ar = newArena(t, be)
	dx, dw := ar.out("dx", randn(rng, rows*in, 1)), ar.out("dw", dw0)
	db := device.Tensor{}
	if withBias {
		db = ar.out("db", db0)
	}
	be.MatmulBackward(dx, dw, db, ar.in("dy", dy), ar.in("x", x), ar.in("w", w), rows, in, out)
	ar.check()
	r := f64(dy)
	x64, w64 := f64(x), f64(w)
	gtol := 4e-6 * float64(max(rows, out)+4)
	checkGradient(t, "dx", x64, func(x []float64) []float64 { return refMatmul(x, w64, bias64, rows, in, out) }, r, ar.get(dx), gtol)
	checkGradient(t, "dw", w64, func(w []float64) []float64 { return refMatmul(x64, w, bias64, rows, in, out) }, r, minus(ar.get(dw), dw0), gtol)
	if withBias {
		checkGradient(t, "db", bias64, func(b []float64) []float64 { return refMatmul(x64, w64, b, rows, in, out) }, r, minus(ar.get(db), db0), gtol)
	}

	// Without dx and db, dw alone accumulates the same bits.
	ar2 := newArena(t, be)
	dw2 := ar2.out("dw", dw0)
	be.MatmulBackward(device.Tensor{}, dw2, device.Tensor{}, ar2.in("dy", dy), ar2.in("x", x), ar2.in("w", w), rows, in, out)
	ar2.check()
	sameBits(t, "dw without dx and db", ar2.get(dw2), ar.get(dw))
}
