package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// TestEmbedding checks the embedding's forward pass exactly (one float32 addition per
// element) and its backward pass against finite differences, accumulated onto the tables'
// prior gradients; tokens repeat, so rows of wte sum several contributions.
func TestEmbedding(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(3, 1))
	for _, sz := range [][4]int{{1, 1, 1, 1}, {1, 3, 5, 2}, {3, 7, 17, 29}, {2, 33, 19, 256}} {
		B, T, d, V := sz[0], sz[1], sz[2], sz[3]
		t.Run(name("B%d,T%d,d%d,V%d", B, T, d, V), func(t *testing.T) {
			tok := tokens(rng, B*T, V)
			wte, wpe := randn(rng, V*d, 1), randn(rng, T*d, 1)
			ar := newArena(t, be)
			out := ar.out("out", randn(rng, B*T*d, 1))
			be.EmbeddingForward(out, ar.in("wte", wte), ar.in("wpe", wpe), tok, T, d)
			ar.check()
			want := make([]float32, B*T*d)
			for r, k := range tok {
				for j := 0; j < d; j++ {
					want[r*d+j] = wte[int(k)*d+j] + wpe[(r%T)*d+j]
				}
			}
			sameBits(t, "out", ar.get(out), want)

			dy, dwte0, dwpe0 := randn(rng, B*T*d, 1), randn(rng, V*d, 1), randn(rng, T*d, 1)
			ar = newArena(t, be)
			dwte, dwpe := ar.out("dwte", dwte0), ar.out("dwpe", dwpe0)
			be.EmbeddingBackward(dwte, dwpe, ar.in("dy", dy), tok, T, d, V)
			ar.check()
			r, e64, p64 := f64(dy), f64(wte), f64(wpe)
			tol := 1e-6 * float64(B*T+4)
			checkGradient(t, "dwte", e64, func(e []float64) []float64 { return refEmbedding(e, p64, tok, T, d) }, r, minus(ar.get(dwte), dwte0), tol)
			checkGradient(t, "dwpe", p64, func(p []float64) []float64 { return refEmbedding(e64, p, tok, T, d) }, r, minus(ar.get(dwpe), dwpe0), tol)

			// No position table (Llama's): the token rows alone, and dwpe skipped.
			ar = newArena(t, be)
			out = ar.out("out", randn(rng, B*T*d, 1))
			be.EmbeddingForward(out, ar.in("wte", wte), device.Tensor{}, tok, T, d)
			ar.check()
			sameBits(t, "out without positions", ar.get(out), f32s(refEmbedding(e64, make([]float64, T*d), tok, T, d)))
			ar = newArena(t, be)
			dwte = ar.out("dwte", dwte0)
			be.EmbeddingBackward(dwte, device.Tensor{}, ar.in("dy", dy), tok, T, d, V)
			ar.check()
			checkGradient(t, "dwte without positions", e64, func(e []float64) []float64 { return refEmbedding(e, p64, tok, T, d) }, r, minus(ar.get(dwte), dwte0), tol)
		})
	}
}

// TestLayerNorm checks LayerNorm's output, mean and rstd against the reference and its
// backward pass against finite differences, every gradient accumulated onto what its
// buffer held; rows of 1 element (variance 0) included.
func TestLayerNorm(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(4, 1))
	const eps = 1e-5
	for _, sz := range [][2]int{{1, 1}, {1, 2}, {3, 17}, {17, 67}, {5, 130}} {
		rows, n := sz[0], sz[1]
		t.Run(name("%dx%d", rows, n), func(t *testing.T) {
			x, w, b := randn(rng, rows*n, 2), randn(rng, n, 1), randn(rng, n, 1)
			for i := range x {
				x[i] += 0.5 // a mean away from 0
			}
			ar := newArena(t, be)
			y, mean, rstd := ar.out("y", randn(rng, rows*n, 1)), ar.out("mean", randn(rng, rows, 1)), ar.out("rstd", randn(rng, rows, 1))
			be.LayerNormForward(y, mean, rstd, ar.in("x", x), ar.in("w", w), ar.in("b", b), rows, n, eps)
			ar.check()
			wy, wm, wr := refLayerNorm(f64(x), f64(w), f64(b), rows, n, eps)
			tol := 2e-6 * float64(n+4)
			closeTo(t, "y", ar.get(y), wy, tol)
			closeTo(t, "mean", ar.get(mean), wm, tol)
			closeTo(t, "rstd", ar.get(rstd), wr, tol)
			savedMean, savedRstd := ar.get(mean), ar.get(rstd)

			dy, dx0, dw0, db0 := randn(rng, rows*n, 1), randn(rng, rows*n, 1), randn(rng, n, 1), randn(rng, n, 1)
			ar = newArena(t, be)
			dx, dw, db := ar.out("dx", dx0), ar.out("dw", dw0), ar.out("db", db0)
			be.LayerNormBackward(dx, dw, db, ar.in("dy", dy), ar.in("x", x), ar.in("mean", savedMean), ar.in("rstd", savedRstd), ar.in("w", w), rows, n)
			ar.check()
			r, x64, w64, b64 := f64(dy), f64(x), f64(w), f64(b)
			fy := func(x, w, b []float64) []float64 { y, _, _ := refLayerNorm(x, w, b, rows, n, eps); return y }
			gtol := 2e-5 * float64(max(n, rows)+4)
			checkGradient(t, "dx", x64, func(x []float64) []float64 { return fy(x, w64, b64) }, r, minus(ar.get(dx), dx0), gtol)
			checkGradient(t, "dw", w64, func(w []float64) []float64 { return fy(x64, w, b64) }, r, minus(ar.get(dw), dw0), gtol)
			checkGradient(t, "db", b64, func(b []float64) []float64 { return fy(x64, w64, b) }, r, minus(ar.get(db), db0), gtol)
		})
	}
}

// geluInputs are n values over GELU's interesting range, with the saturated tails and
// exact zeros among them.
func geluInputs(rng *rand.Rand, n int) []float32 {
	x := randn(rng, n, 3)
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, 9, -9, 40, -40}
	for i := 0; i < n && i < len(special); i++ {
		x[(i*7919)%n] = special[i]
	}
	return x
}

// TestGelu checks GELU's forward and backward passes against the reference and finite
// differences over lengths 1 to past several SIMD blocks, and that y may be x and dx may
// be dy.
func TestGelu(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(5, 1))
	for _, n := range []int{1, 7, 16, 17, 33, 1003} {
		t.Run(name("n%d", n), func(t *testing.T) {
			x := geluInputs(rng, n)
			ar := newArena(t, be)
			y := ar.out("y", randn(rng, n, 1))
			be.GeluForward(y, ar.in("x", x))
			ar.check()
			yv := ar.get(y)
			closeTo(t, "y", yv, refGelu(f64(x)), 2e-6)

			dy := randn(rng, n, 1)
			ar = newArena(t, be)
			dx := ar.out("dx", randn(rng, n, 1))
			be.GeluBackward(dx, ar.in("x", x), ar.in("dy", dy))
			ar.check()
			got := ar.get(dx)
			checkGradient(t, "dx", f64(x), refGelu, f64(dy), got, 1e-5)

			// In place: y over x, dx over dy, the same bits.
			ar2 := newArena(t, be)
			xy, dxy := ar2.out("x=y", x), ar2.out("dy=dx", dy)
			be.GeluBackward(dxy, ar2.in("x", x), dxy)
			be.GeluForward(xy, xy)
			ar2.check()
			sameBits(t, "in-place y", ar2.get(xy), yv)
			sameBits(t, "in-place dx", ar2.get(dxy), got)
		})
	}
}
