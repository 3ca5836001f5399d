package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// groupedSizes are (B, T, H, KVH, hd): one head, heads equal to key/value heads (plain
// multi-head attention), groups of 2 and 3, and T past 32 (where the CPU blocks its rows).
var groupedSizes = [][5]int{{1, 1, 1, 1, 1}, {1, 3, 2, 2, 2}, {2, 5, 4, 2, 4}, {1, 37, 6, 2, 3}, {2, 33, 3, 1, 8}}

// TestGroupedAttention checks grouped-query attention's output against the float64
// reference (key/value heads repeated) and its backward pass through the backend's own
// saved state against finite differences; dq, dk and dv are overwritten, whatever they
// held.
func TestGroupedAttention(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(11, 1))
	for _, sz := range groupedSizes {
		B, T, H, KVH, hd := sz[0], sz[1], sz[2], sz[3], sz[4]
		t.Run(name("B%d,T%d,H%d,KVH%d,hd%d", B, T, H, KVH, hd), func(t *testing.T) {
			d, kvd := H*hd, KVH*hd
			q, k, v := randn(rng, B*T*d, 1), randn(rng, B*T*kvd, 1), randn(rng, B*T*kvd, 1)
			ar := newArena(t, be)
			out := ar.out("out", randn(rng, B*T*d, 1))
			save := ar.out("save", randn(rng, be.AttentionSaveLen(B, T, H), 1))
			qt, kt, vt := ar.in("q", q), ar.in("k", k), ar.in("v", v)
			be.GroupedAttentionForward(out, save, qt, kt, vt, B, T, H, KVH, hd)
			ar.check()
			q64, k64, v64 := f64(q), f64(k), f64(v)
			ref := func(q, k, v []float64) []float64 { return refGroupedAttention(q, k, v, B, T, H, KVH, hd) }
			closeTo(t, "out", ar.get(out), ref(q64, k64, v64), 4e-6*float64(T+hd+4))

			dout := randn(rng, B*T*d, 1)
			ar.bufs[1].want = ar.get(save)
			dq, dk, dv := ar.out("dq", randn(rng, B*T*d, 1)), ar.out("dk", randn(rng, B*T*kvd, 1)), ar.out("dv", randn(rng, B*T*kvd, 1))
			be.GroupedAttentionBackward(dq, dk, dv, ar.in("dout", dout), save, qt, kt, vt, B, T, H, KVH, hd)
			ar.check()
			r, tol := f64(dout), 1e-5*float64(T+hd+4)*float64(H/KVH)
			checkGradient(t, "dq", q64, func(x []float64) []float64 { return ref(x, k64, v64) }, r, ar.get(dq), tol)
			checkGradient(t, "dk", k64, func(x []float64) []float64 { return ref(q64, x, v64) }, r, ar.get(dk), tol)
			checkGradient(t, "dv", v64, func(x []float64) []float64 { return ref(q64, k64, x) }, r, ar.get(dv), tol)
		})
	}
}

// TestRMSNorm checks RMSNorm's output and rstd against the reference and its backward pass
// against finite differences, dx and dw accumulated onto what their buffers held.
func TestRMSNorm(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(12, 1))
	const eps = 1e-5
	for _, sz := range [][2]int{{1, 1}, {1, 2}, {3, 17}, {17, 67}, {5, 130}} {
		rows, n := sz[0], sz[1]
		t.Run(name("%dx%d", rows, n), func(t *testing.T) {
			x, w := randn(rng, rows*n, 2), randn(rng, n, 1)
			ar := newArena(t, be)
			y, rstd := ar.out("y", randn(rng, rows*n, 1)), ar.out("rstd", randn(rng, rows, 1))
			be.RMSNormForward(y, rstd, ar.in("x", x), ar.in("w", w), rows, n, eps)
			ar.check()
			wy, wr := refRMSNorm(f64(x), f64(w), rows, n, eps)
			tol := 2e-6 * float64(n+4)
			closeTo(t, "y", ar.get(y), wy, tol)
			closeTo(t, "rstd", ar.get(rstd), wr, tol)
			saved := ar.get(rstd)

			dy, dx0, dw0 := randn(rng, rows*n, 1), randn(rng, rows*n, 1), randn(rng, n, 1)
			ar = newArena(t, be)
			dx, dw := ar.out("dx", dx0), ar.out("dw", dw0)
			be.RMSNormBackward(dx, dw, ar.in("dy", dy), ar.in("x", x), ar.in("rstd", saved), ar.in("w", w), rows, n)
			ar.check()
			r, x64, w64 := f64(dy), f64(x), f64(w)
			fy := func(x, w []float64) []float64 { y, _ := refRMSNorm(x, w, rows, n, eps); return y }
			gtol := 2e-5 * float64(max(n, rows)+4)
			checkGradient(t, "dx", x64, func(x []float64) []float64 { return fy(x, w64) }, r, minus(ar.get(dx), dx0), gtol)
			checkGradient(t, "dw", w64, func(w []float64) []float64 { return fy(x64, w) }, r, minus(ar.get(dw), dw0), gtol)
		})
	}
}

// TestRope checks rotary embeddings against the reference (tables computed here in
// float64 from theta), the backward pass against finite differences, and that y may be x
// and dx may be dy.
func TestRope(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(13, 1))
	for _, sz := range [][4]int{{1, 1, 1, 2}, {6, 3, 2, 4}, {40, 37, 3, 6}, {66, 33, 2, 16}} {
		rows, T, heads, hd := sz[0], sz[1], sz[2], sz[3]
		t.Run(name("rows%d,T%d,heads%d,hd%d", rows, T, heads, hd), func(t *testing.T) {
			const theta = 10000
			cos64, sin64 := refRopeTables(T, hd, theta)
			cos, sin := f32s(cos64), f32s(sin64)
			n := rows * heads * hd
			x := randn(rng, n, 1)
			ar := newArena(t, be)
			y := ar.out("y", randn(rng, n, 1))
			ct, st := ar.in("cos", cos), ar.in("sin", sin)
			be.RopeForward(y, ar.in("x", x), ct, st, rows, T, heads, hd)
			ar.check()
			ref := func(x []float64) []float64 { return refRope(x, f64(cos), f64(sin), rows, T, heads, hd) }
			yv := ar.get(y)
			closeTo(t, "y", yv, ref(f64(x)), 4e-7)

			dy := randn(rng, n, 1)
			dx := ar.out("dx", randn(rng, n, 1))
			be.RopeBackward(dx, ar.in("dy", dy), ct, st, rows, T, heads, hd)
			ar.check()
			got := ar.get(dx)
			checkGradient(t, "dx", f64(x), ref, f64(dy), got, 1e-5)

			ar2 := newArena(t, be)
			xy, dxy := ar2.out("x=y", x), ar2.out("dy=dx", dy)
			c2, s2 := ar2.in("cos", cos), ar2.in("sin", sin)
			be.RopeForward(xy, xy, c2, s2, rows, T, heads, hd)
			be.RopeBackward(dxy, dxy, c2, s2, rows, T, heads, hd)
			ar2.check()
			sameBits(t, "in-place y", ar2.get(xy), yv)
			sameBits(t, "in-place dx", ar2.get(dxy), got)
		})
	}
}

// TestSwiGLU checks silu(gate)·up and its backward pass against the reference and finite
// differences, saturated tails included, and that h may be gate and dgate may be dh.
func TestSwiGLU(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(14, 1))
	for _, n := range []int{1, 7, 16, 17, 1003} {
		t.Run(name("n%d", n), func(t *testing.T) {
			gate, up := geluInputs(rng, n), randn(rng, n, 1)
			ar := newArena(t, be)
			h := ar.out("h", randn(rng, n, 1))
			gt, ut := ar.in("gate", gate), ar.in("up", up)
			be.SwiGLUForward(h, gt, ut)
			ar.check()
			hv := ar.get(h)
			g64, u64 := f64(gate), f64(up)
			closeTo(t, "h", hv, refSwiGLU(g64, u64), 2e-6)

			dh := randn(rng, n, 1)
			dg, du := ar.out("dgate", randn(rng, n, 1)), ar.out("dup", randn(rng, n, 1))
			be.SwiGLUBackward(dg, du, gt, ut, ar.in("dh", dh))
			ar.check()
			gotG := ar.get(dg)
			checkGradient(t, "dgate", g64, func(x []float64) []float64 { return refSwiGLU(x, u64) }, f64(dh), gotG, 1e-5)
			checkGradient(t, "dup", u64, func(x []float64) []float64 { return refSwiGLU(g64, x) }, f64(dh), ar.get(du), 1e-5)

			ar2 := newArena(t, be)
			gh, dhg := ar2.out("gate=h", gate), ar2.out("dh=dgate", dh)
			u2 := ar2.in("up", up)
			be.SwiGLUBackward(dhg, ar2.out("dup", make([]float32, n)), ar2.in("gate", gate), u2, dhg)
			be.SwiGLUForward(gh, gh, u2)
			ar2.check()
			sameBits(t, "in-place h", ar2.get(gh), hv)
			sameBits(t, "in-place dgate", ar2.get(dhg), gotG)
		})
	}
}

// refGroupedAttention is causal attention with query head h reading key/value head
// h/(H/KVH), in float64.
func refGroupedAttention(q, k, v []float64, B, T, H, KVH, hd int) []float64 {
	d, kvd, g := H*hd, KVH*hd, H/KVH
	out := make([]float64, B*T*d)
	scale := 1 / math.Sqrt(float64(hd))
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			kh := (h / g) * hd
			for i := 0; i < T; i++ {
				s := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := range s {
					for c := 0; c < hd; c++ {
						s[j] += q[(b*T+i)*d+h*hd+c] * k[(b*T+j)*kvd+kh+c]
					}
					s[j] *= scale
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := range s {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for c := 0; c < hd; c++ {
					var acc float64
					for j := range s {
						acc += s[j] / z * v[(b*T+j)*kvd+kh+c]
					}
					out[(b*T+i)*d+h*hd+c] = acc
				}
			}
		}
	}
	return out
}

// refRMSNorm is y = x/√(mean(x²) + eps)·w per row, and each row's 1/√(mean(x²) + eps).
func refRMSNorm(x, w []float64, rows, n int, eps float64) (y, rstd []float64) {
	y, rstd = make([]float64, rows*n), make([]float64, rows)
	for r := 0; r < rows; r++ {
		var ss float64
		for _, v := range x[r*n : r*n+n] {
			ss += v * v
		}
		rstd[r] = 1 / math.Sqrt(ss/float64(n)+eps)
		for j := 0; j < n; j++ {
			y[r*n+j] = x[r*n+j] * rstd[r] * w[j]
		}
	}
	return y, rstd
}

// refRopeTables are the T×hd/2 cosines and sines of the angles t·θ^(−2i/hd).
func refRopeTables(T, hd int, theta float64) (cos, sin []float64) {
	half := hd / 2
	cos, sin = make([]float64, T*half), make([]float64, T*half)
	for t := 0; t < T; t++ {
		for i := 0; i < half; i++ {
			a := float64(t) * math.Pow(theta, -float64(2*i)/float64(hd))
			cos[t*half+i], sin[t*half+i] = math.Cos(a), math.Sin(a)
		}
	}
	return cos, sin
}

// refRope is x·cos + rotate_half(x)·sin per head, rotate_half(x) = (−x₂, x₁).
func refRope(x, cos, sin []float64, rows, T, heads, hd int) []float64 {
	half, d := hd/2, heads*hd
	y := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		t := r % T
		for h := 0; h < heads; h++ {
			o := r*d + h*hd
			for i := 0; i < half; i++ {
				c, s := cos[t*half+i], sin[t*half+i]
				y[o+i] = x[o+i]*c - x[o+half+i]*s
				y[o+half+i] = x[o+half+i]*c + x[o+i]*s
			}
		}
	}
	return y
}

// refSwiGLU is g/(1 + e^−g)·u elementwise.
func refSwiGLU(g, u []float64) []float64 {
	h := make([]float64, len(g))
	for i := range g {
		h[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
	}
	return h
}
