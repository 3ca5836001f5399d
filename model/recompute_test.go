package model

import (
	"math"
	"math/rand/v2"
	"testing"
)

// perturbed is the tiny GPT with larger weights, so that every gradient term matters.
func perturbed(seed uint64) *GPT {
	g := New(tinyConfig(), seed)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, p := range g.Params() {
		for i := range p.Value.Data {
			p.Value.Data[i] += float32(rng.NormFloat64() * 0.3)
		}
	}
	return g
}

// TestRecomputeIsBitIdentical: with every block recomputed, the losses and the gradients
// accumulated over three micro-batches are bit for bit those without recomputation.
func TestRecomputeIsBitIdentical(t *testing.T) {
	plain, re := perturbed(5), perturbed(5)
	layers := WithRecompute(re.Layers)
	if _, ok := layers[1].(*Recomputed); !ok {
		t.Fatalf("block 0 is not recomputed: %T", layers[1])
	}
	ws1, ws2 := &Workspace{}, &Workspace{}
	for m := range 3 {
		mb := tinyBatch(plain.Config, 2, uint64(10+m))
		l1 := ForwardBackward(ws1, plain.Layers, mb, 1.0/3)
		l2 := ForwardBackward(ws2, layers, mb, 1.0/3)
		if l1 != l2 {
			t.Fatalf("micro-batch %d: loss %v, recomputed %v", m, l1, l2)
		}
	}
	p1, p2 := plain.Params(), LayerParams(layers)
	for i := range p1 {
		for k, a := range p1[i].Grad.Data {
			if b := p2[i].Grad.Data[k]; a != b {
				t.Fatalf("%s[%d]: gradient %v, recomputed %v", p1[i].Name, k, a, b)
			}
		}
	}
}

// TestRecomputedGradientsMatchFiniteDifferences checks the recomputed blocks' gradients
// against central differences of the loss.
func TestRecomputedGradientsMatchFiniteDifferences(t *testing.T) {
	g := perturbed(7)
	layers := WithRecompute(g.Layers)
	mb := tinyBatch(g.Config, 2, 3)
	ws := &Workspace{}
	ZeroGrads(layers)
	ForwardBackward(ws, layers, mb, 1)
	loss := func() float64 {
		ws.Reset()
		return float64(Loss(ws, layers, mb))
	}
	const eps = 1e-2
	for _, p := range LayerParams(layers[1 : len(layers)-1]) {
		stride := max(1, p.Value.Size()/12)
		for i := 0; i < p.Value.Size(); i += stride {
			orig := p.Value.Data[i]
			p.Value.Data[i] = orig + eps
			lp := loss()
			p.Value.Data[i] = orig - eps
			lm := loss()
			p.Value.Data[i] = orig
			num, ana := (lp-lm)/(2*eps), float64(p.Grad.Data[i])
			if rel := math.Abs(num-ana) / (1e-3 + math.Abs(num) + math.Abs(ana)); rel > 3e-2 {
				t.Fatalf("%s[%d]: analytic %.6g, numeric %.6g", p.Name, i, ana, num)
			}
		}
	}
}

// TestRecomputeShrinksActivationMemory: a step of the default model holds at least three
// times less activation memory (the workspaces' peak) with recomputation.
func TestRecomputeShrinksActivationMemory(t *testing.T) {
	plain, re := ActivationPeakBytes(DefaultConfig(), 4, false), ActivationPeakBytes(DefaultConfig(), 4, true)
	t.Logf("default model, 4 sequences: %d bytes without recomputation, %d with (÷%.2f)", plain, re, float64(plain)/float64(re))
	if plain < 3*re {
		t.Fatalf("recomputation holds %d bytes, without %d: less than 3× smaller", re, plain)
	}
}
