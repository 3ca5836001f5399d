package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// elementwiseSizes run from one element past the CPU's parallel grain (16384).
var elementwiseSizes = []int{1, 7, 17, 4097, 40009}

// TestAdd checks dst = a + b bit for bit (one float32 addition per element), also with dst
// being a.
func TestAdd(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(8, 1))
	for _, n := range elementwiseSizes {
		t.Run(name("n%d", n), func(t *testing.T) {
			a, b := randn(rng, n, 1), randn(rng, n, 1)
			want := make([]float32, n)
			for i := range want {
				want[i] = a[i] + b[i]
			}
			ar := newArena(t, be)
			dst := ar.out("dst", randn(rng, n, 1))
			be.Add(dst, ar.in("a", a), ar.in("b", b))
			ar.check()
			sameBits(t, "dst", ar.get(dst), want)

			ar = newArena(t, be)
			acc := ar.out("a=dst", a)
			be.Add(acc, acc, ar.in("b", b))
			ar.check()
			sameBits(t, "dst += b", ar.get(acc), want)
		})
	}
}

// TestScale checks x = s·x bit for bit.
func TestScale(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(9, 1))
	for _, n := range elementwiseSizes {
		t.Run(name("n%d", n), func(t *testing.T) {
			x := randn(rng, n, 1)
			const s = float32(-0.3)
			want := make([]float32, n)
			for i := range want {
				want[i] = x[i] * s
			}
			ar := newArena(t, be)
			xt := ar.out("x", x)
			be.Scale(xt, s)
			ar.check()
			sameBits(t, "x", ar.get(xt), want)
		})
	}
}

// TestSumSquares checks Σ x² against a float64 sum (the backend accumulates in float64,
// so only the order of the sum may differ).
func TestSumSquares(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(10, 1))
	for _, n := range append(elementwiseSizes, 100003) {
		t.Run(name("n%d", n), func(t *testing.T) {
			x := randn(rng, n, 2)
			var want float64
			for _, v := range x {
				want += float64(v) * float64(v)
			}
			ar := newArena(t, be)
			got := be.SumSquares(ar.in("x", x))
			ar.check()
			if math.Abs(got-want) > 1e-12*want {
				t.Fatalf("SumSquares = %v, want %v", got, want)
			}
		})
	}
}

// TestAdamW checks one and several AdamW updates, with and without weight decay, against
// the float64 formula.
func TestAdamW(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(11, 1))
	o := device.AdamW{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	for _, n := range []int{1, 17, 9001} {
		for _, decay := range []bool{false, true} {
			t.Run(name("n%d/decay=%v", n, decay), func(t *testing.T) {
				p, m := randn(rng, n, 1), randn(rng, n, 0.01)
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(rng.Float64() * 1e-3)
				}
				p64, m64, v64 := f64(p), f64(m), f64(v)
				ar := newArena(t, be)
				pt, mt, vt := ar.out("p", p), ar.out("m", m), ar.out("v", v)
				for step := 4; step <= 6; step++ {
					g := randn(rng, n, 0.1)
					refAdamW(o.LR, o.Beta1, o.Beta2, o.Eps, o.WeightDecay, p64, f64(g), m64, v64, step, decay)
					be.AdamWStep(o, pt, ar.in(name("g%d", step), g), mt, vt, step, decay)
				}
				ar.check()
				closeTo(t, "p", ar.get(pt), p64, 1e-5)
				closeTo(t, "m", ar.get(mt), m64, 1e-6)
				closeTo(t, "v", ar.get(vt), v64, 1e-6)
			})
		}
	}
}

// TestMemory checks Alloc (zeroed, of the backend's device), the copies to and from the
// host, Copy, Zero and views made with Slice.
func TestMemory(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(12, 1))
	for _, n := range []int{1, 17, 40009} {
		t.Run(name("n%d", n), func(t *testing.T) {
			z := be.Alloc(n, device.F32)
			if z.Len() != n || z.DType() != device.F32 || z.Device() != be.Device() {
				t.Fatalf("Alloc(%d) = %d elements of %v on %v; want %d of f32 on %v", n, z.Len(), z.DType(), z.Device(), n, be.Device())
			}
			sameBits(t, "Alloc", getAll(be, z), make([]float32, n))

			x := randn(rng, n, 1)
			ar := newArena(t, be)
			src, dst := ar.in("src", x), ar.out("dst", randn(rng, n, 1))
			be.Copy(dst, src)
			ar.check()
			sameBits(t, "Copy", ar.get(dst), x)

			lo, hi := n/3, n-n/4
			view := dst.Slice(lo, hi)
			be.Zero(view)
			ar.check()
			want := append([]float32(nil), x...)
			clear(want[lo:hi])
			sameBits(t, "Zero of a view", ar.get(dst), want)
			be.CopyFromHost(view, x[:hi-lo])
			ar.check()
			copy(want[lo:hi], x[:hi-lo])
			sameBits(t, "CopyFromHost into a view", ar.get(dst), want)
			sameBits(t, "CopyToHost of a view", getAll(be, view), x[:hi-lo])
		})
	}
}

func getAll(be device.Backend, t device.Tensor) []float32 {
	h := make([]float32, t.Len())
	be.CopyToHost(h, t)
	return h
}
