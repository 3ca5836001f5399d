package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// SampleOptions control Generate.
type SampleOptions struct {
	// Tokens is how many tokens to add.
	Tokens int
	// Temperature divides the logits; 0 picks the most likely token (greedy).
	Temperature float64
	// TopK keeps only the K most likely tokens before sampling; 0 keeps all.
	TopK int
	// TopP keeps only the most likely tokens whose probabilities (after TopK) add up to at
	// least TopP (nucleus sampling); 0 or ≥ 1 keeps all.
	TopP float64
	// Seed fixes the sampling stream: same seed, same text.
	Seed uint64
	// Vocab, when > 0, samples only ids below it: a tokenizer's vocabulary inside a model's
	// padded one. 0 samples every id of the model.
	Vocab int
}

// Generate extends prompt (at least one token, each below the vocabulary size) by
// opt.Tokens tokens sampled from g, each conditioned on the last Context tokens.
func Generate(g *GPT, prompt []int32, opt SampleOptions) ([]int32, error) {
	cfg := g.Config
	if len(prompt) == 0 {
		return nil, fmt.Errorf("prompt is empty: give at least one token")
	}
	for _, t := range prompt {
		if t < 0 || int(t) >= cfg.Vocab {
			return nil, fmt.Errorf("prompt token %d is outside the vocabulary [0, %d)", t, cfg.Vocab)
		}
	}
	head := unwrapLayer(g.Layers[len(g.Layers)-1]).(*Head) // through LoRALayer, Recomputed
	body := g.Layers[:len(g.Layers)-1]
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5a5a))
	out := append([]int32(nil), prompt...)
	ws := &Workspace{}
	probs := make([]float64, cfg.Vocab)
	for n := 0; n < opt.Tokens; n++ {
		ws.Reset()
		ctx := out[max(0, len(out)-cfg.Context):]
		mb := &Batch{B: 1, T: len(ctx), Inputs: ctx}
		var x []float32
		for _, l := range body {
			x, _ = l.Forward(ws, mb, x)
		}
		logits := head.Logits(ws, x, len(ctx))
		row := logits[(len(ctx)-1)*cfg.Vocab : len(ctx)*cfg.Vocab]
		if opt.Vocab > 0 && opt.Vocab < cfg.Vocab {
			row = row[:opt.Vocab]
		}
		out = append(out, sampleToken(row, probs[:len(row)], opt, rng))
	}
	return out, nil
}

// sampleToken draws one token from the logits of one position.
func sampleToken(logits []float32, probs []float64, opt SampleOptions, rng *rand.Rand) int32 {
	best := 0
	for j, v := range logits {
		if v > logits[best] {
			best = j
		}
	}
	if opt.Temperature <= 0 {
		return int32(best)
	}
	cut := math.Inf(-1)
	if opt.TopK > 0 && opt.TopK < len(logits) {
		sorted := make([]float64, len(logits))
		for j, v := range logits {
			sorted[j] = float64(v)
		}
		sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
		cut = sorted[opt.TopK-1]
	}
	var z float64
	for j, v := range logits {
		probs[j] = 0
		if float64(v) >= cut {
			probs[j] = math.Exp((float64(v) - float64(logits[best])) / opt.Temperature)
			z += probs[j]
		}
	}
	if opt.TopP > 0 && opt.TopP < 1 {
		z = nucleus(probs, z, opt.TopP)
	}
	u := rng.Float64() * z
	for j, p := range probs {
		if u < p {
			return int32(j)
		}
		u -= p
	}
	return int32(best)
}

// nucleus zeroes every probability outside the smallest set of the most likely tokens
// whose mass is at least p of z (ties broken by the lower id) and returns the kept mass.
func nucleus(probs []float64, z, p float64) float64 {
	order := make([]int, len(probs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return probs[order[a]] > probs[order[b]] })
	var kept float64
	n := 0
	for n < len(order) && kept < p*z {
		kept += probs[order[n]]
		n++
	}
	for _, j := range order[n:] {
		probs[j] = 0
	}
	return kept
}
