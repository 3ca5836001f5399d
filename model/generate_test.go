package model

import (
	"math/rand/v2"
	"testing"
)

func TestNucleusKeepsTheSmallestLikelySet(t *testing.T) {
	probs := []float64{0.1, 0.5, 0.05, 0.3, 0.05}
	kept := nucleus(probs, 1, 0.75)
	if want := []float64{0, 0.5, 0, 0.3, 0}; kept != 0.8 || !equalFloat(probs, want) {
		t.Fatalf("kept %g of %v, want 0.8 of %v", kept, probs, want)
	}
}

func TestTopPSamplesOnlyTheNucleus(t *testing.T) {
	logits := []float32{0, 3, -1, 2.5, -1}
	probs := make([]float64, len(logits))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		if tok := sampleToken(logits, probs, SampleOptions{Temperature: 1, TopP: 0.6}, rng); tok != 1 && tok != 3 {
			t.Fatalf("sampled %d outside the nucleus {1, 3}", tok)
		}
	}
}

func equalFloat(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestGenerateSamplesBelowVocab(t *testing.T) {
	g := New(Config{Layers: 1, DModel: 16, Heads: 2, Context: 8, Vocab: 300}, 1)
	out, err := Generate(g, []int32{1, 2}, SampleOptions{Tokens: 200, Temperature: 5, Seed: 3, Vocab: 260})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range out[2:] {
		if v >= 260 {
			t.Fatalf("sampled %d, at or past the tokenizer's 260 ids", v)
		}
	}
}
