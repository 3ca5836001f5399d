package model

import "fmt"

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
}

// FLOPsPerToken is forward plus backward arithmetic per token.
func (l LayerCost) FLOPsPerToken() float64 { return l.ForwardFLOPsPerToken + l.BackwardFLOPsPerToken }

// StaticBytes is the memory the layer holds whatever the batch: parameters, gradients and
// optimizer state.
func (l LayerCost) StaticBytes() int64 { return l.ParamBytes + l.GradBytes + l.OptimizerBytes }

// LayerCosts returns the cost of every layer of the layer list, in order.
func (c Config) LayerCosts() []LayerCost {
	d, T, V := float64(c.DModel), float64(c.Context), float64(c.Vocab)
	costs := make([]LayerCost, 0, c.NumLayers())
	costs = append(costs, c.layerCost("embed", int64(c.Vocab*c.DModel+c.Context*c.DModel),
		d, 0, d, 0))
	// Block: c_attn 2·d·3d, scores and A·V 2·2·T·d, c_proj 2·d², c_fc 2·d·4d, mlp c_proj 2·4d·d,
	// plus the elementwise work (two LayerNorms, GELU, softmax, residuals), ~ 30·d + 5·T·H.
	blockFwd := 24*d*d + 4*T*d + 30*d + 5*T*float64(c.Heads)
	blockParams := int64(12*c.DModel*c.DModel + 13*c.DModel)
	// Saved per token: ln1 out, qkv, attention probabilities (H·T), attention out, x after
	// attention, ln2 out, fc pre- and post-GELU, plus LayerNorm statistics.
	blockSaved := (d + 3*d + float64(c.Heads)*T + d + d + d + 4*d + 4*d + 4) * 4
	for i := 0; i < c.Layers; i++ {
		costs = append(costs, c.layerCost(fmt.Sprintf("block.%d", i), blockParams,
			blockFwd, 2*blockFwd, d, blockSaved))
	}
	headFwd := 2*d*V + 10*d + 5*V
	costs = append(costs, c.layerCost("head", int64(c.Vocab*c.DModel+2*c.DModel),
		headFwd, 2*headFwd, 0, (d+d+V+2)*4))
	return costs
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
