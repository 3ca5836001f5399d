package model

import (
	"math"
	"math/rand/v2"
	"strings"
)

// GPT is the model of docs/gpt.md as its layer list: Layers[0] is the Embedding,
// Layers[1..cfg.Layers] the Blocks, and the last the Head.
type GPT struct {
	Config Config
	Layers []Layer
}

// New builds the GPT of cfg (which must be valid) with docs/gpt.md's initialisation from seed.
func New(cfg Config, seed uint64) *GPT {
	return &GPT{Config: cfg, Layers: NewLayers(cfg, seed, 0, cfg.NumLayers())}
}

// NewLayers builds layers [first, last) of cfg's layer list, initialised from seed exactly
// as New initialises them: layer i draws from its own random stream (seed, i), so a
// pipeline stage can build its slice alone and hold the same weights as a whole model.
func NewLayers(cfg Config, seed uint64, first, last int) []Layer {
	layers := make([]Layer, 0, last-first)
	for i := first; i < last; i++ {
		l := newLayer(cfg, i, false)
		InitLayer(cfg, l, seed, i)
		layers = append(layers, l)
	}
	return layers
}

// NewLayerShells builds layers [first, last) of cfg's layer list whose parameters have
// their shapes but no data: the caller binds every Value.Data and Grad.Data (a chunked
// offload store does, to slices of its resident chunks) and initialises them with
// InitLayer. Nothing of the parameters' size is allocated.
func NewLayerShells(cfg Config, first, last int) []Layer {
	layers := make([]Layer, 0, last-first)
	for i := first; i < last; i++ {
		layers = append(layers, newLayer(cfg, i, true))
	}
	return layers
}

func newLayer(cfg Config, i int, shell bool) Layer {
	switch {
	case i == 0:
		return newEmbedding(cfg, shell)
	case i == cfg.NumLayers()-1:
		return newHead(cfg, shell)
	default:
		return newBlock(cfg, i-1, shell)
	}
}

// InitLayer sets layer index's parameters to docs/gpt.md's initial values: weights
// N(0, 0.02), the residual projections (attn.c_proj.weight, mlp.c_proj.weight)
// N(0, 0.02/√(2·layers)), biases 0, LayerNorm weights 1 and biases 0.
func InitLayer(cfg Config, l Layer, seed uint64, index int) {
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	resid := 0.02 / math.Sqrt(2*float64(cfg.Layers))
	for _, p := range l.Params() {
		data := p.Value.Data
		switch {
		case strings.Contains(p.Name, "ln_"):
			if strings.HasSuffix(p.Name, ".weight") {
				fill(data, 1)
			} else {
				fill(data, 0)
			}
		case strings.HasSuffix(p.Name, ".bias"):
			fill(data, 0)
		default:
			std := 0.02
			if strings.HasSuffix(p.Name, "c_proj.weight") {
				std = resid
			}
			for i := range data {
				data[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
}

func fill(x []float32, v float32) {
	for i := range x {
		x[i] = v
	}
}

// Params lists every parameter in layer order.
func (g *GPT) Params() []*Param { return LayerParams(g.Layers) }

// LayerParams lists the parameters of layers in order.
func LayerParams(layers []Layer) []*Param {
	var ps []*Param
	for _, l := range layers {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// ZeroGrads clears the gradients of layers.
func ZeroGrads(layers []Layer) {
	for _, p := range LayerParams(layers) {
		p.Grad.Zero()
	}
}

// ForwardBackward runs one micro-batch through layers (a whole model, from the embedding
// to the head), accumulates gradients scaled by weight (1/M for one of M micro-batches),
// and returns the micro-batch's mean loss.
func ForwardBackward(ws *Workspace, layers []Layer, mb *Batch, weight float32) float32 {
	x := []float32(nil)
	saved := make([]Saved, len(layers))
	for i, l := range layers {
		x, saved[i] = l.Forward(ws, mb, x)
	}
	loss := x[0]
	dy := []float32{weight}
	for i := len(layers) - 1; i >= 0; i-- {
		dy = layers[i].Backward(ws, mb, saved[i], dy)
	}
	return loss
}

// Loss runs one micro-batch forward through a whole model and returns its mean loss.
func Loss(ws *Workspace, layers []Layer, mb *Batch) float32 {
	var x []float32
	for _, l := range layers {
		x, _ = l.Forward(ws, mb, x)
	}
	return x[0]
}
