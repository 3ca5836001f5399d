package devicetest

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// Threaded is what a backend whose operations spread over host threads offers the suite:
// SetThreads caps the threads of one operation (n ≤ 0: the default). The CPU backend has
// it; the suite then checks that results do not depend on the cap.
type Threaded interface {
	SetThreads(n int)
}

// detCase runs one operation, large enough that a parallel backend splits it, on inputs
// made from a fixed seed, and returns every output's elements.
type detCase struct {
	name string
	run  func(be device.Backend) []float32
}

// detCases cover every operation. Sizes are past the CPU's parallel grains (GEMM: 2 M
// multiply-adds; rows: 16–64; elementwise: 8–16 K elements).
var detCases = []detCase{
	{"gemm", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(20, 1))
		m, n, k := 129, 131, 160
		a, b, c := put(be, randn(rng, m*k, 1)), put(be, randn(rng, n*k, 1)), put(be, randn(rng, m*n, 1))
		be.Gemm(false, true, m, n, k, 1, a, k, b, k, 1, c, n)
		return getAll(be, c)
	}},
	{"matmul", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(21, 1))
		rows, in, out := 130, 64, 300
		x, w, bias := put(be, randn(rng, rows*in, 1)), put(be, randn(rng, in*out, 1)), put(be, randn(rng, out, 1))
		y, dy := be.Alloc(rows*out, device.F32), put(be, randn(rng, rows*out, 1))
		dx, dw, db := be.Alloc(rows*in, device.F32), put(be, randn(rng, in*out, 1)), put(be, randn(rng, out, 1))
		be.MatmulForward(y, x, w, bias, rows, in, out)
		be.MatmulBackward(dx, dw, db, dy, x, w, rows, in, out)
		return cat(be, y, dx, dw, db)
	}},
	{"embedding", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(22, 1))
		B, T, d, V := 4, 64, 48, 256
		tok := tokens(rng, B*T, 20) // few distinct tokens: long sums per row of dwte
		wte, wpe := put(be, randn(rng, V*d, 1)), put(be, randn(rng, T*d, 1))
		out, dy := be.Alloc(B*T*d, device.F32), put(be, randn(rng, B*T*d, 1))
		dwte, dwpe := put(be, randn(rng, V*d, 1)), put(be, randn(rng, T*d, 1))
		be.EmbeddingForward(out, wte, wpe, tok, T, d)
		be.EmbeddingBackward(dwte, dwpe, dy, tok, T, d, V)
		return cat(be, out, dwte, dwpe)
	}},
	{"layernorm", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(23, 1))
		rows, n := 200, 96
		x, w, b, dy := put(be, randn(rng, rows*n, 1)), put(be, randn(rng, n, 1)), put(be, randn(rng, n, 1)), put(be, randn(rng, rows*n, 1))
		y, mean, rstd := be.Alloc(rows*n, device.F32), be.Alloc(rows, device.F32), be.Alloc(rows, device.F32)
		dx, dw, db := put(be, randn(rng, rows*n, 1)), put(be, randn(rng, n, 1)), put(be, randn(rng, n, 1))
		be.LayerNormForward(y, mean, rstd, x, w, b, rows, n, 1e-5)
		be.LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, rows, n)
		return cat(be, y, mean, rstd, dx, dw, db)
	}},
	{"gelu", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(24, 1))
		n := 50021
		x, dy := put(be, geluInputs(rng, n)), put(be, randn(rng, n, 1))
		y, dx := be.Alloc(n, device.F32), be.Alloc(n, device.F32)
		be.GeluForward(y, x)
		be.GeluBackward(dx, x, dy)
		return cat(be, y, dx)
	}},
	{"attention", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(25, 1))
		B, T, H, hd := 2, 40, 3, 8
		d := H * hd
		qkv, dout := put(be, randn(rng, B*T*3*d, 1)), put(be, randn(rng, B*T*d, 1))
		out, save, dqkv := be.Alloc(B*T*d, device.F32), be.Alloc(be.AttentionSaveLen(B, T, H), device.F32), be.Alloc(B*T*3*d, device.F32)
		be.AttentionForward(out, save, qkv, B, T, H, hd)
		be.AttentionBackward(dqkv, dout, save, qkv, B, T, H, hd)
		return cat(be, out, dqkv)
	}},
	{"grouped-attention", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(29, 1))
		B, T, H, KVH, hd := 2, 40, 6, 2, 8
		d, kvd := H*hd, KVH*hd
		q, k, v, dout := put(be, randn(rng, B*T*d, 1)), put(be, randn(rng, B*T*kvd, 1)), put(be, randn(rng, B*T*kvd, 1)), put(be, randn(rng, B*T*d, 1))
		out, save := be.Alloc(B*T*d, device.F32), be.Alloc(be.AttentionSaveLen(B, T, H), device.F32)
		dq, dk, dv := be.Alloc(B*T*d, device.F32), be.Alloc(B*T*kvd, device.F32), be.Alloc(B*T*kvd, device.F32)
		be.GroupedAttentionForward(out, save, q, k, v, B, T, H, KVH, hd)
		be.GroupedAttentionBackward(dq, dk, dv, dout, save, q, k, v, B, T, H, KVH, hd)
		return cat(be, out, dq, dk, dv)
	}},
	{"rmsnorm-rope-swiglu", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(30, 1))
		rows, n, T, heads := 200, 96, 50, 4
		x, w, dy := put(be, randn(rng, rows*n, 1)), put(be, randn(rng, n, 1)), put(be, randn(rng, rows*n, 1))
		y, rstd := be.Alloc(rows*n, device.F32), be.Alloc(rows, device.F32)
		dx, dw := put(be, randn(rng, rows*n, 1)), put(be, randn(rng, n, 1))
		be.RMSNormForward(y, rstd, x, w, rows, n, 1e-5)
		be.RMSNormBackward(dx, dw, dy, x, rstd, w, rows, n)
		c64, s64 := refRopeTables(T, n/heads, 10000)
		cos, sin := put(be, f32s(c64)), put(be, f32s(s64))
		r := be.Alloc(rows*n, device.F32)
		be.RopeForward(r, x, cos, sin, rows, T, heads, n/heads)
		be.RopeBackward(dy, dy, cos, sin, rows, T, heads, n/heads)
		h, dg, du := be.Alloc(rows*n, device.F32), be.Alloc(rows*n, device.F32), be.Alloc(rows*n, device.F32)
		be.SwiGLUForward(h, x, y)
		be.SwiGLUBackward(dg, du, x, y, dx)
		return cat(be, y, rstd, dx, dw, r, dy, h, dg, du)
	}},
	{"crossentropy", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(26, 1))
		N, V := 70, 300
		logits, tgt := put(be, randn(rng, N*V, 3)), tokens(rng, N, V)
		losses, dl := make([]float64, N), be.Alloc(N*V, device.F32)
		be.CrossEntropy(losses, dl, logits, tgt, V, 0.5)
		return append(f32bits(losses), getAll(be, dl)...)
	}},
	{"elementwise", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(27, 1))
		n := 70001
		a, b := put(be, randn(rng, n, 1)), put(be, randn(rng, n, 1))
		be.Add(a, a, b)
		be.Scale(b, 0.7)
		return append(cat(be, a, b), f32bits([]float64{be.SumSquares(a)})...)
	}},
	{"adamw", func(be device.Backend) []float32 {
		rng := rand.New(rand.NewPCG(28, 1))
		n := 40009
		p, g, m, v := put(be, randn(rng, n, 1)), put(be, randn(rng, n, 1)), be.Alloc(n, device.F32), be.Alloc(n, device.F32)
		be.AdamWStep(device.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}, p, g, m, v, 1, true)
		return cat(be, p, m, v)
	}},
}

// TestDeterminism checks that every operation gives the same bits twice on the same
// inputs and, for a Threaded backend, with one thread as with four.
func TestDeterminism(t *testing.T, be device.Backend) {
	for _, c := range detCases {
		t.Run(c.name, func(t *testing.T) {
			first := c.run(be)
			sameBits(t, "second run", c.run(be), first)
			th, ok := be.(Threaded)
			if !ok {
				return
			}
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0))))
			defer th.SetThreads(0)
			th.SetThreads(1)
			one := c.run(be)
			th.SetThreads(4)
			sameBits(t, "4 threads against 1", c.run(be), one)
			sameBits(t, "1 thread against the default", one, first)
		})
	}
}

func put(be device.Backend, x []float32) device.Tensor {
	t := be.Alloc(len(x), device.F32)
	be.CopyFromHost(t, x)
	return t
}

func cat(be device.Backend, ts ...device.Tensor) []float32 {
	var out []float32
	for _, t := range ts {
		out = append(out, getAll(be, t)...)
	}
	return out
}

// f32bits carries float64 results through sameBits: each as its two 32-bit halves.
func f32bits(x []float64) []float32 {
	out := make([]float32, 0, 2*len(x))
	for _, v := range x {
		b := math.Float64bits(v)
		out = append(out, math.Float32frombits(uint32(b)), math.Float32frombits(uint32(b>>32)))
	}
	return out
}

// TestGemmWindows checks that each element of a GEMM's C has the same bits whatever m and
// n are: a window of C computed alone (rows and columns of A and B taken as views) equals
// the same window of the whole product. The engine relies on it: a micro-batch or a
// replica's share of a batch is a block of rows, and split runs reproduce one process
// bit for bit.
func TestGemmWindows(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(29, 1))
	for _, form := range []struct{ tA, tB bool }{{false, false}, {false, true}, {true, false}} {
		t.Run(name("tA=%v,tB=%v", form.tA, form.tB), func(t *testing.T) {
			m, n, k := 150, 140, 300
			a, b := put(be, randn(rng, m*k, 1)), put(be, randn(rng, k*n, 1))
			lda, ldb := k, n
			if form.tA {
				lda = m
			}
			if form.tB {
				ldb = k
			}
			full := be.Alloc(m*n, device.F32)
			be.Gemm(form.tA, form.tB, m, n, k, 1, a, lda, b, ldb, 0, full, n)
			whole := getAll(be, full)
			for _, w := range [][4]int{{0, 1, 0, n}, {17, 18, 3, 4}, {5, 150, 0, 33}, {31, 97, 61, 140}} {
				r0, r1, c0, c1 := w[0], w[1], w[2], w[3]
				av, bv := a.Slice(r0*lda, a.Len()), b.Slice(c0, b.Len())
				if form.tA {
					av = a.Slice(r0, a.Len())
				}
				if form.tB {
					bv = b.Slice(c0*ldb, b.Len())
				}
				c := be.Alloc((r1-r0)*(c1-c0), device.F32)
				be.Gemm(form.tA, form.tB, r1-r0, c1-c0, k, 1, av, lda, bv, ldb, 0, c, c1-c0)
				got := getAll(be, c)
				for i := r0; i < r1; i++ {
					sameBits(t, name("rows %d–%d, columns %d–%d: C row %d", r0, r1, c0, c1, i),
						got[(i-r0)*(c1-c0):(i-r0+1)*(c1-c0)], whole[i*n+c0:i*n+c1])
				}
			}
		})
	}
}
