package model

import (
	"math"
	"math/rand/v2"
	"strings"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// GPT is a model of any family (docs/gpt.md, docs/models.md) as its layer list:
// Layers[0] is the Embedding, Layers[1..cfg.Layers] the blocks (Block, or LlamaBlock for
// the llama family), and the last the Head.
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
// A tied head in a slice without the embedding starts with a zero table (model/tied.go).
func NewLayers(cfg Config, seed uint64, first, last int) []Layer {
	b := layerBuilder{cfg: cfg, whole: first == 0 && last == cfg.NumLayers()}
	layers := make([]Layer, 0, last-first)
	for i := first; i < last; i++ {
		l := b.layer(i)
		InitLayer(cfg, l, seed, i)
		layers = append(layers, l)
	}
	return tie(cfg, layers, first, last)
}

// NewLayerShells builds layers [first, last) of cfg's layer list whose parameters have
// their shapes but no data: the caller binds every Value.Data and Grad.Data (a chunked
// offload store does, to slices of its resident chunks) and initialises them with
// InitLayer. Nothing of the parameters' size is allocated. A tied head's view of the
// table is not among the parameters: shells of a tied head are not supported by the
// offload store, which refuses tied models.
func NewLayerShells(cfg Config, first, last int) []Layer {
	b := layerBuilder{cfg: cfg, shell: true, whole: first == 0 && last == cfg.NumLayers()}
	layers := make([]Layer, 0, last-first)
	for i := first; i < last; i++ {
		layers = append(layers, b.layer(i))
	}
	return tie(cfg, layers, first, last)
}

// tie gives a tied model's head its view of the token table: in a stage that also holds
// the embedding, a parameter sharing the embedding's Value with a gradient of its own
// (model/tied.go); in a stage without it, the head keeps the copy newHead allocated,
// which the pipeline refreshes from the embedding's stage before each step.
func tie(cfg Config, layers []Layer, first, last int) []Layer {
	if !cfg.TiedHead() || first != 0 || last != cfg.NumLayers() {
		return layers
	}
	h, e := layers[len(layers)-1].(*Head), layers[0].(*Embedding)
	h.lmHead.Value = e.wte.Value
	return layers
}

// layerBuilder builds the layers of one model, sharing what its blocks may share (Llama's
// rotary tables).
type layerBuilder struct {
	cfg   Config
	shell bool
	whole bool // building every layer: a tied head shares the embedding's table
	rope  *ropeTables
}

func (b *layerBuilder) layer(i int) Layer {
	switch {
	case i == 0:
		return newEmbedding(b.cfg, b.shell)
	case i == b.cfg.NumLayers()-1:
		return newHead(b.cfg, b.shell, b.whole)
	case b.cfg.FamilyName() == jobspec.FamilyLlama:
		if b.rope == nil {
			b.rope = newRopeTables(b.cfg)
		}
		return newLlamaBlock(b.cfg, i-1, b.shell, b.rope)
	default:
		return newBlock(b.cfg, i-1, b.shell)
	}
}

// InitLayer sets layer index's parameters to docs/gpt.md's initial values: weights
// N(0, 0.02), the projections into the residual stream (GPT-2's attn.c_proj.weight and
// mlp.c_proj.weight, Llama's o_proj and down_proj) N(0, 0.02/√(2·layers)), biases 0,
// norm weights 1 and biases 0.
func InitLayer(cfg Config, l Layer, seed uint64, index int) {
	rng := rand.New(rand.NewPCG(seed, uint64(index)))
	resid := 0.02 / math.Sqrt(2*float64(cfg.Layers))
	for _, p := range l.Params() {
		data := p.Value.Data
		switch {
		case isNorm(p.Name):
			if strings.HasSuffix(p.Name, ".weight") {
				fill(data, 1)
			} else {
				fill(data, 0)
			}
		case strings.HasSuffix(p.Name, ".bias"):
			fill(data, 0)
		default:
			std := 0.02
			if isResidualProjection(p.Name) {
				std = resid
			}
			for i := range data {
				data[i] = float32(rng.NormFloat64() * std)
			}
		}
	}
}

// isNorm reports whether name is a LayerNorm or RMSNorm parameter.
func isNorm(name string) bool {
	return strings.Contains(name, "ln_") || strings.Contains(name, "layernorm") || name == "model.norm.weight"
}

// isResidualProjection reports whether name is a weight that writes into the residual
// stream.
func isResidualProjection(name string) bool {
	return strings.HasSuffix(name, "c_proj.weight") || strings.HasSuffix(name, "o_proj.weight") ||
		strings.HasSuffix(name, "down_proj.weight")
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

// ZeroGrads clears the gradients of layers, a tied head's gradient of the table included.
func ZeroGrads(layers []Layer) {
	for _, p := range LayerParams(layers) {
		p.Grad.Zero()
	}
	if _, h := TiedTables(layers); h != nil && h.Grad != nil && h.Grad.Data != nil { // nil: frozen (LoRA)
		h.Grad.Zero()
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
	FoldTiedGrad(layers)
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
