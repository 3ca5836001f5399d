package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func randSlice(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

func dot64(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// checkGrad compares an analytic gradient with central differences of f with respect to x,
// at every element (or a sample of them for large x). f must read x afresh on each call.
// The tolerance is loose enough for float32 and tight enough to fail on a wrong sign,
// transpose or missing term.
func checkGrad(t *testing.T, name string, x []float32, analytic []float32, f func() float64) {
	t.Helper()
	const eps = 1e-2
	var worst float64
	stride := max(1, len(x)/64)
	for i := 0; i < len(x); i += stride {
		orig := x[i]
		x[i] = orig + eps
		fp := f()
		x[i] = orig - eps
		fm := f()
		x[i] = orig
		num := (fp - fm) / (2 * eps)
		err := math.Abs(num-float64(analytic[i])) / (1e-2 + math.Abs(num) + math.Abs(float64(analytic[i])))
		if err > worst {
			worst = err
		}
		if err > 2e-2 {
			t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", name, i, analytic[i], num)
			return
		}
	}
	t.Logf("%s: worst relative error %.2g", name, worst)
}

func TestExpfAccuracy(t *testing.T) {
	for x := float32(-87); x < 88; x += 0.0137 {
		got, want := float64(Expf(x)), math.Exp(float64(x))
		if rel := math.Abs(got-want) / want; rel > 2.5e-7 {
			t.Fatalf("Expf(%g) = %g, want %g (rel %.3g)", x, got, want, rel)
		}
	}
	if !math.IsInf(float64(Expf(100)), 1) || Expf(-100) != 0 || Expf(float32(math.NaN())) == Expf(float32(math.NaN())) {
		t.Fatal("Expf edge cases")
	}
}

func TestGeluMatchesReferenceAndGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := randSlice(rng, 200, 2)
	y := make([]float32, len(x))
	GeluForward(y, x)
	for i := range x {
		if d := math.Abs(float64(y[i] - geluRef(x[i]))); d > 1e-6 {
			t.Fatalf("gelu(%g) = %g, ref %g", x[i], y[i], geluRef(x[i]))
		}
	}
	w := randSlice(rng, len(x), 1)
	dx := make([]float32, len(x))
	GeluBackward(dx, x, w)
	for i := range x {
		if d := math.Abs(float64(dx[i] - w[i]*geluGradRef(x[i]))); d > 1e-5 {
			t.Fatalf("gelu' mismatch at %g", x[i])
		}
	}
	checkGrad(t, "gelu.x", x, dx, func() float64 {
		GeluForward(y, x)
		return dot64(y, w)
	})
}

func TestLayerNormMatchesReferenceAndGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rows, n := 5, 12
	x := randSlice(rng, rows*n, 1.5)
	w := randSlice(rng, n, 1)
	b := randSlice(rng, n, 1)
	y := make([]float32, rows*n)
	mean, rstd := make([]float32, rows), make([]float32, rows)
	LayerNormForward(y, mean, rstd, x, w, b, rows, n, LayerNormEps)
	ref := make([]float32, n)
	for r := 0; r < rows; r++ {
		layerNormRowRef(ref, x[r*n:r*n+n], w, b, LayerNormEps)
		for j := range ref {
			if math.Abs(float64(ref[j]-y[r*n+j])) > 1e-5 {
				t.Fatalf("row %d col %d: %g vs ref %g", r, j, y[r*n+j], ref[j])
			}
		}
	}
	g := randSlice(rng, rows*n, 1)
	dx, dw, db := make([]float32, rows*n), make([]float32, n), make([]float32, n)
	LayerNormBackward(dx, dw, db, g, x, mean, rstd, w, rows, n)
	f := func() float64 {
		LayerNormForward(y, mean, rstd, x, w, b, rows, n, LayerNormEps)
		return dot64(y, g)
	}
	checkGrad(t, "layernorm.x", x, dx, f)
	checkGrad(t, "layernorm.w", w, dw, f)
	checkGrad(t, "layernorm.b", b, db, f)
}

func TestAttentionMatchesReferenceAndGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	B, T, H, hd := 2, 7, 3, 4
	d := H * hd
	qkv := randSlice(rng, B*T*3*d, 1)
	out, probs := make([]float32, B*T*d), make([]float32, B*H*T*T)
	AttentionForward(out, probs, qkv, B, T, H, hd)
	refOut, refProbs := make([]float32, B*T*d), make([]float32, B*H*T*T)
	attentionRef(refOut, refProbs, qkv, B, T, H, hd)
	for i := range out {
		if math.Abs(float64(out[i]-refOut[i])) > 1e-5 {
			t.Fatalf("out[%d] = %g, ref %g", i, out[i], refOut[i])
		}
	}
	for i := range probs {
		if math.Abs(float64(probs[i]-refProbs[i])) > 1e-6 {
			t.Fatalf("probs[%d] = %g, ref %g", i, probs[i], refProbs[i])
		}
	}
	g := randSlice(rng, len(out), 1)
	dqkv := make([]float32, len(qkv))
	AttentionBackward(dqkv, g, probs, qkv, B, T, H, hd)
	checkGrad(t, "attention.qkv", qkv, dqkv, func() float64 {
		AttentionForward(out, probs, qkv, B, T, H, hd)
		return dot64(out, g)
	})
}

func TestEmbeddingGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	V, T, d := 9, 4, 5
	tokens := []int32{1, 3, 3, 0, 8, 1, 3, 2}
	wte, wpe := randSlice(rng, V*d, 1), randSlice(rng, T*d, 1)
	out := make([]float32, len(tokens)*d)
	EmbeddingForward(out, wte, wpe, tokens, T, d)
	if out[d+2] != wte[3*d+2]+wpe[1*d+2] {
		t.Fatal("embedding forward: row 1 is not wte[3] + wpe[1]")
	}
	g := randSlice(rng, len(out), 1)
	dwte, dwpe := make([]float32, V*d), make([]float32, T*d)
	EmbeddingBackward(dwte, dwpe, g, tokens, T, d, V)
	f := func() float64 {
		EmbeddingForward(out, wte, wpe, tokens, T, d)
		return dot64(out, g)
	}
	checkGrad(t, "embedding.wte", wte, dwte, f)
	checkGrad(t, "embedding.wpe", wpe, dwpe, f)
}

func TestCrossEntropyMatchesReferenceAndGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	N, V := 6, 13
	logits := randSlice(rng, N*V, 3)
	targets := []int32{0, 12, 5, 5, 7, 1}
	losses := make([]float64, N)
	dl := make([]float32, N*V)
	scale := float32(0.7)
	CrossEntropy(losses, dl, logits, targets, V, scale)
	refD := make([]float32, V)
	for r := 0; r < N; r++ {
		want := crossEntropyRowRef(refD, logits[r*V:r*V+V], targets[r], scale)
		if math.Abs(losses[r]-want) > 1e-5 {
			t.Fatalf("row %d loss %g, ref %g", r, losses[r], want)
		}
		for j := range refD {
			if math.Abs(float64(refD[j]-dl[r*V+j])) > 1e-6 {
				t.Fatalf("row %d dlogit %d: %g vs ref %g", r, j, dl[r*V+j], refD[j])
			}
		}
	}
	checkGrad(t, "crossentropy.logits", logits, dl, func() float64 {
		CrossEntropy(losses, nil, logits, targets, V, 0)
		var s float64
		for _, l := range losses {
			s += l
		}
		return float64(scale) * s
	})
	// In place: dlogits may alias logits.
	CrossEntropy(losses, logits, logits, targets, V, scale)
	for i := range dl {
		if logits[i] != dl[i] {
			t.Fatalf("in-place gradient differs at %d", i)
		}
	}
}

func TestLinearGradientsThroughGemm(t *testing.T) {
	// y = x·W (+ bias), the three GEMM forms of a linear layer's forward and backward.
	rng := rand.New(rand.NewPCG(11, 12))
	rows, in, out := 6, 5, 7
	x, w, bias := randSlice(rng, rows*in, 1), randSlice(rng, in*out, 1), randSlice(rng, out, 1)
	y := make([]float32, rows*out)
	fwd := func() {
		Gemm(false, false, rows, out, in, 1, x, in, w, out, 0, y, out)
		AddBias(y, rows, out, bias)
	}
	fwd()
	g := randSlice(rng, rows*out, 1)
	dw, db, dx := make([]float32, in*out), make([]float32, out), make([]float32, rows*in)
	Gemm(true, false, in, out, rows, 1, x, in, g, out, 1, dw, out)
	BiasGrad(db, g, rows, out)
	Gemm(false, true, rows, in, out, 1, g, out, w, out, 0, dx, in)
	f := func() float64 { fwd(); return dot64(y, g) }
	checkGrad(t, "linear.x", x, dx, f)
	checkGrad(t, "linear.w", w, dw, f)
	checkGrad(t, "linear.b", bias, db, f)
}

func TestAdamWMatchesFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	n := 50
	p, g := randSlice(rng, n, 1), randSlice(rng, n, 1)
	m, v := make([]float32, n), make([]float32, n)
	ref := make([]float64, n)
	for i := range p {
		ref[i] = float64(p[i])
	}
	rm, rv := make([]float64, n), make([]float64, n)
	o := AdamW{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	for step := 1; step <= 3; step++ {
		o.Step(p, g, m, v, step, true)
		for i := range ref {
			gi := float64(g[i])
			ref[i] *= 1 - o.LR*o.WeightDecay
			rm[i] = 0.9*rm[i] + 0.1*gi
			rv[i] = 0.95*rv[i] + 0.05*gi*gi
			mh := rm[i] / (1 - math.Pow(0.9, float64(step)))
			vh := rv[i] / (1 - math.Pow(0.95, float64(step)))
			ref[i] -= o.LR * mh / (math.Sqrt(vh) + 1e-8)
		}
	}
	for i := range p {
		if math.Abs(float64(p[i])-ref[i]) > 1e-5 {
			t.Fatalf("p[%d] = %g, formula %g", i, p[i], ref[i])
		}
	}
	// Without decay the parameters move by the Adam step alone.
	q := []float32{1}
	AdamW{LR: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.5}.Step(q, []float32{2}, []float32{0}, []float32{0}, 1, false)
	if math.Abs(float64(q[0])-0.9) > 1e-6 {
		t.Fatalf("no-decay step gave %g, want 0.9", q[0])
	}
}

func TestClipCoefficient(t *testing.T) {
	if c := ClipCoefficient(4, 1); math.Abs(float64(c)-0.5) > 1e-6 {
		t.Fatalf("norm 2 clipped to 1: coefficient %g, want 0.5", c)
	}
	if c := ClipCoefficient(0.25, 1); c != 1 {
		t.Fatalf("norm 0.5 must not be clipped: %g", c)
	}
	x := []float32{3, 4}
	if s := SumSquares(x); s != 25 {
		t.Fatalf("SumSquares = %g", s)
	}
}

func TestElementwiseResultsIndependentOfThreads(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	rows, n := 300, 96
	x, dy := randSlice(rng, rows*n, 1), randSlice(rng, rows*n, 1)
	w, b := randSlice(rng, n, 1), randSlice(rng, n, 1)
	run := func(threads int) ([]float32, []float32, []float32, float64) {
		SetThreads(threads)
		defer SetThreads(0)
		y, mean, rstd := make([]float32, rows*n), make([]float32, rows), make([]float32, rows)
		LayerNormForward(y, mean, rstd, x, w, b, rows, n, LayerNormEps)
		dx, dw, db := make([]float32, rows*n), make([]float32, n), make([]float32, n)
		LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, rows, n)
		BiasGrad(db, dy, rows, n)
		g, gd := make([]float32, rows*n-3), make([]float32, rows*n-3) // not a multiple of 16
		GeluForward(g, x[3:])
		GeluBackward(gd, x[3:], dy[3:])
		y = append(append(y, g...), gd...)
		return y, dx, append(dw, db...), SumSquares(dx)
	}
	y1, dx1, g1, s1 := run(1)
	y2, dx2, g2, s2 := run(4)
	for i := range y1 {
		if y1[i] != y2[i] || (i < len(dx1) && dx1[i] != dx2[i]) {
			t.Fatalf("element %d differs between 1 and 4 threads", i)
		}
	}
	for i := range g1 {
		if g1[i] != g2[i] {
			t.Fatalf("parameter gradient %d differs between 1 and 4 threads", i)
		}
	}
	if s1 != s2 {
		t.Fatalf("SumSquares differs: %g vs %g", s1, s2)
	}
}

// TestVectorKernelsMatchPortable runs every vector-kernel path this CPU has (the portable
// loops, AVX2, AVX-512) against the portable loops, at lengths that exercise the 16-lane
// body and the scalar tail, with guard values at the clamps and beyond.
func TestVectorKernelsMatchPortable(t *testing.T) {
	for _, v := range vecImpls() {
		t.Run(v.name, func(t *testing.T) { testVecImpl(t, v) })
	}
}

// vecGuards are inputs at and beyond the edges of the tanh clamp and exp's range.
var vecGuards = []float32{40, -40, 9, -9, 88.5, -87.5, -200, 0, -0, 1e-30, 3, -3}

func testVecImpl(t *testing.T, v vecImpl) {
	rng := rand.New(rand.NewPCG(17, 18))
	for _, n := range []int{1, 15, 16, 17, 31, 32, 33, 64, 100, 1000} {
		x, dy := randSlice(rng, n, 3), randSlice(rng, n, 1)
		for i := 0; i < n; i += 7 {
			x[i] = vecGuards[(i/7)%len(vecGuards)]
		}
		a, b := make([]float32, n), make([]float32, n)
		v.geluForwardSpan(a, x)
		geluForwardGo(b, x)
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 1e-6*(1+math.Abs(float64(b[i]))) {
				t.Fatalf("n=%d gelu[%d] of %g: %g vs portable %g", n, i, x[i], a[i], b[i])
			}
		}
		// Near x ≈ −3 gelu' is the difference of two nearly equal terms, so both paths
		// are held to an absolute bound against the float64 derivative.
		v.geluBackwardSpan(a, x, dy)
		geluBackwardGo(b, x, dy)
		for i := range a {
			want := float64(dy[i]) * float64(geluGradRef(x[i]))
			tol := 4e-6 * (1 + math.Abs(float64(dy[i])))
			if math.Abs(float64(a[i])-want) > tol || math.Abs(float64(b[i])-want) > tol {
				t.Fatalf("n=%d gelu'[%d] of %g: %g, portable %g, float64 %g", n, i, x[i], a[i], b[i], want)
			}
		}
		x[n-1] = -200 // underflows
		za := v.expShiftSpan(a, x, 0.5, 0.25)
		zb := expShiftGo(b, x, 0.5, 0.25)
		if math.Abs(float64(za-zb)) > 1e-5*float64(zb) {
			t.Fatalf("n=%d exp sums %g vs portable %g", n, za, zb)
		}
		for i := range a {
			if math.Abs(float64(a[i]-b[i])) > 3e-7*float64(b[i])+1e-30 {
				t.Fatalf("n=%d exp[%d] of %g: %g vs portable %g", n, i, x[i], a[i], b[i])
			}
		}
	}
}

// TestVectorPathsAgreeBitForBit holds the SIMD paths to the same bits as each other: the
// AVX2 kernels do the AVX-512 kernels' operations in the same order, so a model trained
// on either CPU computes the same numbers.
func TestVectorPathsAgreeBitForBit(t *testing.T) {
	impls := vecImpls()[1:]
	if len(impls) < 2 {
		t.Skip("fewer than two SIMD vector paths on this CPU")
	}
	rng := rand.New(rand.NewPCG(19, 20))
	const n = 4096
	x, dy := randSlice(rng, n, 6), randSlice(rng, n, 1)
	for i := 0; i < len(vecGuards); i++ {
		x[i*5] = vecGuards[i]
	}
	type out struct {
		f, b, e []float32
		z       float32
	}
	run := func(v vecImpl) out {
		o := out{make([]float32, n), make([]float32, n), make([]float32, n), 0}
		v.geluForwardSpan(o.f, x)
		v.geluBackwardSpan(o.b, x, dy)
		o.z = v.expShiftSpan(o.e, x, 1.5, 0.5)
		return o
	}
	want := run(impls[0])
	for _, v := range impls[1:] {
		got := run(v)
		for i := range n {
			if math.Float32bits(got.f[i]) != math.Float32bits(want.f[i]) ||
				math.Float32bits(got.b[i]) != math.Float32bits(want.b[i]) ||
				math.Float32bits(got.e[i]) != math.Float32bits(want.e[i]) {
				t.Fatalf("%s vs %s differ at %d (x=%g): gelu %g/%g gelu' %g/%g exp %g/%g", v.name, impls[0].name,
					i, x[i], got.f[i], want.f[i], got.b[i], want.b[i], got.e[i], want.e[i])
			}
		}
		if got.z != want.z {
			t.Fatalf("%s vs %s: exp sums %g vs %g", v.name, impls[0].name, got.z, want.z)
		}
	}
}

func TestTanhf(t *testing.T) {
	for x := float32(-12); x <= 12; x += 0.001 {
		if d := math.Abs(float64(Tanhf(x)) - math.Tanh(float64(x))); d > 4e-7 {
			t.Fatalf("Tanhf(%g) off by %g", x, d)
		}
	}
}

// TestAddRowExactOnEveryPath: the SIMD row add of AddBias and BiasGrad gives the Go loop's
// bits on every path, at lengths around its 8- and 32-element steps.
func TestAddRowExactOnEveryPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, v := range vecImpls() {
		for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 40, 71, 1000} {
			a, b := randSlice(rng, n, 1e3), randSlice(rng, n, 1e-3)
			want := append([]float32(nil), a...)
			for j := range want {
				want[j] += b[j]
			}
			v.addRow(a, b)
			for j := range a {
				if math.Float32bits(a[j]) != math.Float32bits(want[j]) {
					t.Fatalf("%s n=%d [%d]: %g, want %g", v.name, n, j, a[j], want[j])
				}
			}
		}
	}
}
