package kernels

import (
	"math"
	"testing"
)

// bruteBound is B(t) summed term by term, the definition UpdateBound's closed form must
// match.
func bruteBound(b1, b2 float64, t int) float64 {
	sum := 0.0
	for k := range t {
		sum += math.Pow(b1*b1/b2, float64(k))
	}
	return (1 - b1) / (1 - math.Pow(b1, float64(t))) * math.Sqrt((1-math.Pow(b2, float64(t)))/(1-b2)) * math.Sqrt(sum)
}

// TestUpdateBoundValues: the closed form matches the sum, B(1) = 1 and B(∞) ≈ 1.165 at
// (0.9, 0.95), β1² ≥ β2 grows with t, and hyper-parameters without a bound give +Inf.
func TestUpdateBoundValues(t *testing.T) {
	for _, b := range [][2]float64{{0.9, 0.95}, {0.9, 0.999}, {0.5, 0.9}, {0, 0.95}, {0.9, 0.81}, {0.95, 0.9}} {
		o := AdamW{Beta1: b[0], Beta2: b[1], Eps: 1e-8}
		for _, step := range []int{1, 2, 3, 10, 100, 1000} {
			got, want := o.UpdateBound(step), bruteBound(b[0], b[1], step)
			if math.Abs(got-want) > 1e-9*want {
				t.Errorf("β %v step %d: UpdateBound %v, the sum %v", b, step, got, want)
			}
		}
	}
	o := AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	if b := o.UpdateBound(1); math.Abs(b-1) > 1e-12 {
		t.Errorf("B(1) = %v, want 1", b)
	}
	if b := o.UpdateBound(1 << 20); math.Abs(b-1.165) > 1e-3 {
		t.Errorf("B(∞) = %v, want ≈ 1.165", b)
	}
	grow := AdamW{Beta1: 0.95, Beta2: 0.9}
	if a, b := grow.UpdateBound(100), grow.UpdateBound(1000); !(b > 5*a) {
		t.Errorf("β1² > β2: B(100) %v, B(1000) %v, want it growing", a, b)
	}
	for _, bad := range []AdamW{{Beta1: 1, Beta2: 0.95}, {Beta1: 0.9, Beta2: 1}, {Beta1: 0.9, Beta2: 0}, {Beta1: -0.1, Beta2: 0.95}, {Beta1: 0.9, Beta2: 0.95, Eps: -1}} {
		if b := bad.UpdateBound(5); !math.IsInf(b, 1) {
			t.Errorf("%+v: UpdateBound %v, want +Inf", bad, b)
		}
	}
	if b := o.UpdateBound(0); !math.IsInf(b, 1) {
		t.Errorf("step 0: %v, want +Inf", b)
	}
}

// TestUpdateBoundIsReached: the bound is tight. Cauchy–Schwarz holds with equality for
// |g_{t−k}| ∝ (β1/β2)^k, so that sequence, fed to Step in float64 arithmetic with ε = 0,
// moves a parameter by LR·B(t); Step (float32) moves it by that within rounding.
func TestUpdateBoundIsReached(t *testing.T) {
	o := AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95}
	for _, steps := range []int{1, 5, 30} {
		p, m, v := []float32{0}, []float32{0}, []float32{0}
		for s := 1; s <= steps; s++ {
			p[0] = 0
			g := float32(math.Pow(o.Beta2/o.Beta1, float64(s))) // ∝ (β1/β2)^(steps−s)
			o.Step(p, []float32{g}, m, v, s, false)
		}
		moved, want := math.Abs(float64(p[0])), o.LR*o.UpdateBound(steps)
		if math.Abs(moved-want) > 1e-5*want {
			t.Errorf("%d steps: the worst sequence moved %v, LR·B %v", steps, moved, want)
		}
	}
}

// BenchmarkUpdateBound is one B(t), what ZeRO's sup over τ ≤ t costs per step.
func BenchmarkUpdateBound(b *testing.B) {
	o := AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	s := 0.0
	for i := range b.N {
		s += o.UpdateBound(i%100000 + 1)
	}
	if s < 0 {
		b.Fatal(s)
	}
}
