package model

import "fmt"

// Logits is the model's output for one sequence of tokens (1 ≤ len ≤ Context, each below
// the vocabulary size): len(tokens) rows of Vocab logits, row i predicting the token after
// tokens[i]. It is the forward pass of training and generation, without a loss: what a
// reference implementation's logits are compared with (docs/models.md).
func Logits(g *GPT, tokens []int32) ([]float32, error) {
	cfg := g.Config
	if len(tokens) == 0 || len(tokens) > cfg.Context {
		return nil, fmt.Errorf("%d tokens: give 1 to the context's %d", len(tokens), cfg.Context)
	}
	for _, t := range tokens {
		if t < 0 || int(t) >= cfg.Vocab {
			return nil, fmt.Errorf("token %d is outside the vocabulary [0, %d)", t, cfg.Vocab)
		}
	}
	ws := &Workspace{}
	mb := &Batch{B: 1, T: len(tokens), Inputs: tokens}
	var x []float32
	body := g.Layers[:len(g.Layers)-1]
	for _, l := range body {
		x, _ = l.Forward(ws, mb, x)
	}
	head := g.Layers[len(g.Layers)-1].(*Head)
	return append([]float32(nil), head.Logits(ws, x, len(tokens))...), nil
}
