package model

import (
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// LayerCost is what one layer of the layer list costs, the balancer's input. FLOPs count
// a multiply-add as two; bytes are float32.
type LayerCost struct {
	// Name is the layer's name: "embed", "block.{i}" or "head".
	Name string `json:"name"`
	// ForwardFLOPsPerToken and BackwardFLOPsPerToken are the arithmetic of one token's pass
	// through the layer (attention counted over the full context, as computed).
	ForwardFLOPsPerToken  float64 `json:"forward_flops_per_token"`
	BackwardFLOPsPerToken float64 `json:"backward_flops_per_token"`
	// ParamBytes holds the layer's parameters; GradBytes their gradients.
	ParamBytes int64 `json:"param_bytes"`
	GradBytes  int64 `json:"grad_bytes"`
	// OptimizerBytes is the AdamW state: two moments per parameter.
	OptimizerBytes int64 `json:"optimizer_bytes"`
	// OutputBytesPerToken crosses the layer's output boundary per token (and its gradient
	// crosses back): the activation a pipeline stage ending here sends.
	OutputBytesPerToken int64 `json:"output_bytes_per_token"`
	// SavedBytesPerToken is what the forward pass keeps per token for the backward pass,
	// per in-flight micro-batch.
	SavedBytesPerToken int64 `json:"saved_bytes_per_token"`
	// TiedTableBytes is, for a tied head, the token table's size: a pipeline stage that
	// holds the head without the embedding keeps a copy of it, and the two stages exchange
	// the table and its gradient once per step (model/tied.go). Zero otherwise.
	TiedTableBytes int64 `json:"tied_table_bytes,omitempty"`
}

// FLOPsPerToken is forward plus backward arithmetic per token.
func (l LayerCost) FLOPsPerToken() float64 { return l.ForwardFLOPsPerToken + l.BackwardFLOPsPerToken }

// StaticBytes is the memory the layer holds whatever the batch: parameters, gradients and
// optimizer state.
func (l LayerCost) StaticBytes() int64 { return l.ParamBytes + l.GradBytes + l.OptimizerBytes }

// LayerCosts returns the cost of every layer of the layer list, in order, for the model's
// family. A tied head's lm_head is the embedding's parameter: its bytes are counted once,
// in the embedding, and its arithmetic in the head, which computes with it; the head's own
// gradient buffer for it is in the head's GradBytes.
func (c Config) LayerCosts() []LayerCost {
	d, V := float64(c.DModel), float64(c.Vocab)
	costs := make([]LayerCost, 0, c.NumLayers())
	embedParams := int64(c.Vocab*c.DModel + c.Context*c.DModel)
	if c.FamilyName() == jobspec.FamilyLlama {
		embedParams = int64(c.Vocab * c.DModel) // no position table
	}
	costs = append(costs, c.layerCost("embed", embedParams, d, 0, d, 0))
	blockFwd, blockParams, blockSaved := c.blockCost()
	for i := 0; i < c.Layers; i++ {
		costs = append(costs, c.layerCost(fmt.Sprintf("block.%d", i), blockParams,
			blockFwd, 2*blockFwd, d, blockSaved))
	}
	headFwd := 2*d*V + 10*d + 5*V
	headParams := int64(c.Vocab*c.DModel + 2*c.DModel) // ln_f's weight and bias, lm_head
	if c.FamilyName() == jobspec.FamilyLlama {
		headParams = int64(c.Vocab*c.DModel + c.DModel) // model.norm's weight, lm_head
	}
	if c.TiedHead() {
		headParams -= int64(c.Vocab * c.DModel)
	}
	head := c.layerCost("head", headParams, headFwd, 2*headFwd, 0, (d+d+V+2)*4)
	if c.TiedHead() {
		// The head accumulates its gradient of the table in a buffer of its own.
		head.TiedTableBytes = int64(4 * c.Vocab * c.DModel)
		head.GradBytes += head.TiedTableBytes
	}
	return append(costs, head)
}

// blockCost is one block's forward FLOPs per token, its parameter count and the bytes per
// token its forward pass keeps.
func (c Config) blockCost() (fwd float64, params int64, saved float64) {
	d, T, H, hid := float64(c.DModel), float64(c.Context), float64(c.Heads), float64(c.Hidden())
	if c.FamilyName() == jobspec.FamilyLlama {
		kv := float64(c.KVHeadCount() * c.HeadDim())
		// q and o 2·2d², k and v 2·2·d·kv, gate, up and down 3·2·d·hid, scores and A·V
		// 2·2·T·d, plus the elementwise work (two RMSNorms, the rotations, SwiGLU,
		// softmax, residuals).
		fwd = 4*d*d + 4*d*kv + 6*d*hid + 4*T*d + 10*d + 6*(d+kv) + 5*hid + 5*T*H
		params = int64(2*c.DModel*c.DModel + 2*c.DModel*c.KVHeadCount()*c.HeadDim() + 3*c.DModel*c.Hidden() + 2*c.DModel)
		// Saved per token: the normed input, q, k, v, the probabilities (H·T), the
		// attention's output, x after attention, the second normed input, gate, up and
		// their product, and the two norms' statistics.
		saved = (d + d + 2*kv + H*T + d + d + d + 3*hid + 2) * 4
		return fwd, params, saved
	}
	// Block: c_attn 2·d·3d, scores and A·V 2·2·T·d, c_proj 2·d², c_fc 2·d·hid, mlp c_proj
	// 2·hid·d, plus the elementwise work (two LayerNorms, GELU, softmax, residuals), ~ 30·d
	// + 5·T·H.
	fwd = 8*d*d + 4*d*hid + 4*T*d + 30*d + 5*T*H
	params = int64(4*c.DModel*c.DModel + 4*c.DModel + 2*c.DModel*c.Hidden() + c.Hidden() + 5*c.DModel)
	// Saved per token: ln1 out, qkv, attention probabilities (H·T), attention out, x after
	// attention, ln2 out, fc pre- and post-GELU, plus LayerNorm statistics.
	saved = (d + 3*d + H*T + d + d + d + hid + hid + 4) * 4
	return fwd, params, saved
}

func (c Config) layerCost(name string, params int64, fwd, bwd, outFloats, saved float64) LayerCost {
	return LayerCost{
		Name:                  name,
		ForwardFLOPsPerToken:  fwd,
		BackwardFLOPsPerToken: bwd,
		ParamBytes:            4 * params,
		GradBytes:             4 * params,
		OptimizerBytes:        8 * params,
		OutputBytesPerToken:   int64(4 * outFloats),
		SavedBytesPerToken:    int64(saved),
	}
}
