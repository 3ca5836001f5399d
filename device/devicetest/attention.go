package devicetest

import (
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// attentionSizes are (B, T, H, hd): one position, one head, odd head widths, and T past
// 32 (where the CPU blocks its rows).
var attentionSizes = [][4]int{{1, 1, 1, 1}, {1, 3, 1, 2}, {2, 5, 3, 4}, {1, 37, 2, 7}, {2, 33, 2, 16}}

// TestAttention checks causal attention's output against the reference and its backward
// pass (through the backend's own saved state) against finite differences of the
// reference; dqkv is overwritten, whatever it held.
func TestAttention(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(6, 1))
	for _, sz := range attentionSizes {
		B, T, H, hd := sz[0], sz[1], sz[2], sz[3]
		t.Run(name("B%d,T%d,H%d,hd%d", B, T, H, hd), func(t *testing.T) {
			d := H * hd
			qkv := randn(rng, B*T*3*d, 1)
			ar := newArena(t, be)
			out := ar.out("out", randn(rng, B*T*d, 1))
			save := ar.out("save", randn(rng, be.AttentionSaveLen(B, T, H), 1))
			qt := ar.in("qkv", qkv)
			be.AttentionForward(out, save, qt, B, T, H, hd)
			ar.check()
			closeTo(t, "out", ar.get(out), refAttention(f64(qkv), B, T, H, hd), 4e-6*float64(T+hd+4))

			dout := randn(rng, B*T*d, 1)
			ar.bufs[1].want = ar.get(save) // the saved state is the backward's input
			dqkv := ar.out("dqkv", randn(rng, B*T*3*d, 1))
			be.AttentionBackward(dqkv, ar.in("dout", dout), save, qt, B, T, H, hd)
			ar.check()
			checkGradient(t, "dqkv", f64(qkv), func(x []float64) []float64 { return refAttention(x, B, T, H, hd) },
				f64(dout), ar.get(dqkv), 1e-5*float64(T+hd+4))
		})
	}
}

// TestCrossEntropy checks the per-row losses against the reference, the gradient against
// finite differences (scaled by scale), that a forward-only call (empty dlogits) gives the
// same losses, and that dlogits may be logits.
func TestCrossEntropy(t *testing.T, be device.Backend) {
	rng := rand.New(rand.NewPCG(7, 1))
	for _, sz := range [][2]int{{1, 1}, {3, 2}, {1, 17}, {19, 300}, {5, 257}} {
		N, V := sz[0], sz[1]
		t.Run(name("N%d,V%d", N, V), func(t *testing.T) {
			logits, tgt := randn(rng, N*V, 3), tokens(rng, N, V)
			const scale = 0.37
			want := refCrossEntropy(f64(logits), tgt, V)
			ar := newArena(t, be)
			fwd := make([]float64, N)
			be.CrossEntropy(fwd, device.Tensor{}, ar.in("logits", logits), tgt, V, 0)
			ar.check()
			closeTo(t, "losses", f32s(fwd), want, 4e-6*float64(V+4))

			ar = newArena(t, be)
			losses := make([]float64, N)
			dl := ar.out("dlogits", randn(rng, N*V, 1))
			be.CrossEntropy(losses, dl, ar.in("logits", logits), tgt, V, scale)
			ar.check()
			for r := range losses {
				if losses[r] != fwd[r] {
					t.Fatalf("losses[%d] = %v with the gradient, %v without", r, losses[r], fwd[r])
				}
			}
			r := make([]float64, N)
			for i := range r {
				r[i] = scale
			}
			got := ar.get(dl)
			checkGradient(t, "dlogits", f64(logits), func(x []float64) []float64 { return refCrossEntropy(x, tgt, V) }, r, got, 1e-5)

			ar2 := newArena(t, be)
			inPlace := ar2.out("logits=dlogits", logits)
			be.CrossEntropy(losses, inPlace, inPlace, tgt, V, scale)
			ar2.check()
			sameBits(t, "in-place dlogits", ar2.get(inPlace), got)
		})
	}
}

func f32s(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}
