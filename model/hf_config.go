package model

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// A Hugging Face model directory's config.json, the part meshnode reads and writes
// (docs/models.md, "Hugging Face interop"): GPT2LMHeadModel (model_type gpt2) and
// LlamaForCausalLM (model_type llama). Anything in the file that would change the
// computation and that meshnode does not compute (another activation, rotary scaling,
// biases in Llama's projections) is refused by name rather than ignored.

// HFConfigFile is the name of a Hugging Face model's configuration in its directory.
const HFConfigFile = "config.json"

// hfConfigJSON holds both families' fields; pointers tell an absent field from a zero.
type hfConfigJSON struct {
	ModelType         string `json:"model_type"`
	VocabSize         *int   `json:"vocab_size"`
	TieWordEmbeddings *bool  `json:"tie_word_embeddings"`

	// GPT-2.
	NLayer             *int     `json:"n_layer"`
	NHead              *int     `json:"n_head"`
	NEmbd              *int     `json:"n_embd"`
	NPositions         *int     `json:"n_positions"`
	NInner             *int     `json:"n_inner"`
	LayerNormEpsilon   *float64 `json:"layer_norm_epsilon"`
	ActivationFunction *string  `json:"activation_function"`
	ScaleAttnWeights   *bool    `json:"scale_attn_weights"`
	ScaleAttnByLayer   *bool    `json:"scale_attn_by_inverse_layer_idx"`

	// Llama.
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	HiddenAct             *string         `json:"hidden_act"`
	HeadDim               *int            `json:"head_dim"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeInterleaved       *bool           `json:"rope_interleaved"`
}

// hfFieldError is a config.json field that is absent or cannot be meshnode's.
type hfFieldError struct{ field, msg string }

func (e hfFieldError) Error() string { return e.field + ": " + e.msg }

// ParseHFConfig reads a Hugging Face config.json (data; name for errors, the file's path)
// into the model it describes. Every error is one line naming the file and the field.
func ParseHFConfig(data []byte, name string) (Config, error) {
	var c hfConfigJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("%s: not a config.json: %v", name, oneLine(err))
	}
	var cfg Config
	var err error
	switch c.ModelType {
	case "gpt2":
		cfg, err = c.gpt2()
	case "llama":
		cfg, err = c.llama()
	case "":
		err = hfFieldError{"model_type", "missing (meshnode reads gpt2 and llama)"}
	default:
		err = hfFieldError{"model_type", fmt.Sprintf("%q is not a family meshnode has (gpt2, llama)", c.ModelType)}
	}
	if err == nil {
		if verr := cfg.Validate(); verr != nil {
			err = fmt.Errorf("describes a model meshnode cannot build: %s", oneLine(verr))
		}
	}
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", name, err)
	}
	return cfg, nil
}

// need returns *p, or an error naming the absent field.
func need[T any](field string, p *T) (T, error) {
	if p == nil {
		var zero T
		return zero, hfFieldError{field, "missing"}
	}
	return *p, nil
}

func (c *hfConfigJSON) gpt2() (Config, error) {
	cfg := Config{Family: jobspec.FamilyGPT2}
	var errs [6]error
	cfg.Layers, errs[0] = need("n_layer", c.NLayer)
	cfg.Heads, errs[1] = need("n_head", c.NHead)
	cfg.DModel, errs[2] = need("n_embd", c.NEmbd)
	cfg.Context, errs[3] = need("n_positions", c.NPositions)
	cfg.Vocab, errs[4] = need("vocab_size", c.VocabSize)
	if c.LayerNormEpsilon != nil {
		cfg.NormEps = *c.LayerNormEpsilon
	}
	if c.NInner != nil && cfg.DModel > 0 && *c.NInner != 4*cfg.DModel {
		cfg.Intermediate = *c.NInner
	}
	if a := c.ActivationFunction; a != nil && *a != "gelu_new" && *a != "gelu_pytorch_tanh" {
		errs[5] = hfFieldError{"activation_function", fmt.Sprintf("%q: meshnode's GPT-2 computes the tanh GELU (gelu_new)", *a)}
	}
	for _, err := range errs {
		if err != nil {
			return Config{}, err
		}
	}
	switch {
	case c.ScaleAttnWeights != nil && !*c.ScaleAttnWeights:
		return Config{}, hfFieldError{"scale_attn_weights", "false: meshnode's attention divides by √(head width)"}
	case c.ScaleAttnByLayer != nil && *c.ScaleAttnByLayer:
		return Config{}, hfFieldError{"scale_attn_by_inverse_layer_idx", "true: meshnode's attention does not scale by layer"}
	}
	if c.TieWordEmbeddings != nil && !*c.TieWordEmbeddings {
		// An untied GPT-2 is meshnode's gpt family, whose LayerNorm epsilon is fixed.
		if eps := jobspec.Model(cfg).Eps(); eps != 1e-5 {
			return Config{}, hfFieldError{"tie_word_embeddings", fmt.Sprintf("false needs layer_norm_epsilon 1e-05 (meshnode's untied GPT-2 is the gpt family), got %g", eps)}
		}
		cfg.Family, cfg.NormEps = jobspec.FamilyGPT, 0
	}
	return cfg, nil
}

func (c *hfConfigJSON) llama() (Config, error) {
	cfg := Config{Family: jobspec.FamilyLlama}
	var errs [6]error
	cfg.Layers, errs[0] = need("num_hidden_layers", c.NumHiddenLayers)
	cfg.Heads, errs[1] = need("num_attention_heads", c.NumAttentionHeads)
	cfg.DModel, errs[2] = need("hidden_size", c.HiddenSize)
	cfg.Intermediate, errs[3] = need("intermediate_size", c.IntermediateSize)
	cfg.Context, errs[4] = need("max_position_embeddings", c.MaxPositionEmbeddings)
	cfg.Vocab, errs[5] = need("vocab_size", c.VocabSize)
	for _, err := range errs {
		if err != nil {
			return Config{}, err
		}
	}
	if c.NumKeyValueHeads != nil && *c.NumKeyValueHeads != cfg.Heads {
		cfg.KVHeads = *c.NumKeyValueHeads
	}
	if c.RMSNormEps != nil {
		cfg.NormEps = *c.RMSNormEps
	}
	if c.RopeTheta != nil {
		cfg.RopeTheta = *c.RopeTheta
	}
	cfg.Tied = c.TieWordEmbeddings != nil && *c.TieWordEmbeddings
	switch {
	case c.HiddenAct != nil && *c.HiddenAct != "silu":
		return Config{}, hfFieldError{"hidden_act", fmt.Sprintf("%q: meshnode's Llama computes SwiGLU with silu", *c.HiddenAct)}
	case c.AttentionBias != nil && *c.AttentionBias:
		return Config{}, hfFieldError{"attention_bias", "true: meshnode's Llama projections have no biases"}
	case c.MLPBias != nil && *c.MLPBias:
		return Config{}, hfFieldError{"mlp_bias", "true: meshnode's Llama MLP has no biases"}
	case len(c.RopeScaling) > 0 && !bytes.Equal(bytes.TrimSpace(c.RopeScaling), []byte("null")):
		return Config{}, hfFieldError{"rope_scaling", "set: meshnode computes plain rotary positions (rope_scaling null)"}
	case c.RopeInterleaved != nil && *c.RopeInterleaved:
		return Config{}, hfFieldError{"rope_interleaved", "true: meshnode rotates Hugging Face's rotate_half pairs (the two halves of a head)"}
	case c.HeadDim != nil && cfg.Heads > 0 && *c.HeadDim != cfg.DModel/cfg.Heads:
		return Config{}, hfFieldError{"head_dim", fmt.Sprintf("%d: meshnode's head width is hidden_size/num_attention_heads (%d)", *c.HeadDim, cfg.DModel/cfg.Heads)}
	}
	return cfg, nil
}

// HFConfigJSON is the config.json of cfg for Hugging Face transformers
// (AutoModelForCausalLM): GPT2LMHeadModel for the gpt and gpt2 families (gpt: untied),
// LlamaForCausalLM for llama, float32 weights. extra adds fields (the token ids).
func HFConfigJSON(cfg Config, extra map[string]any) ([]byte, error) {
	m := jobspec.Model(cfg)
	out := map[string]any{"torch_dtype": "float32", "vocab_size": cfg.Vocab, "tie_word_embeddings": cfg.TiedHead()}
	switch cfg.FamilyName() {
	case jobspec.FamilyLlama:
		out["architectures"], out["model_type"] = []string{"LlamaForCausalLM"}, "llama"
		out["hidden_size"], out["intermediate_size"] = cfg.DModel, cfg.Hidden()
		out["num_hidden_layers"], out["num_attention_heads"], out["num_key_value_heads"] = cfg.Layers, cfg.Heads, cfg.KVHeadCount()
		out["head_dim"], out["max_position_embeddings"] = cfg.HeadDim(), cfg.Context
		out["rms_norm_eps"], out["rope_theta"], out["rope_scaling"] = m.Eps(), m.Theta(), nil
		out["hidden_act"], out["attention_bias"], out["mlp_bias"] = "silu", false, false
		out["attention_dropout"], out["initializer_range"] = 0.0, 0.02
	default:
		out["architectures"], out["model_type"] = []string{"GPT2LMHeadModel"}, "gpt2"
		out["n_layer"], out["n_head"], out["n_embd"] = cfg.Layers, cfg.Heads, cfg.DModel
		out["n_positions"], out["n_ctx"], out["n_inner"] = cfg.Context, cfg.Context, cfg.Hidden()
		out["layer_norm_epsilon"], out["activation_function"] = m.Eps(), "gelu_new"
		out["resid_pdrop"], out["embd_pdrop"], out["attn_pdrop"] = 0.0, 0.0, 0.0
		out["initializer_range"] = 0.02
	}
	for k, v := range extra {
		out[k] = v
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// oneLine keeps an error's first line (JSON errors are one already; joined errors are not).
func oneLine(err error) string {
	s := err.Error()
	if i := bytes.IndexByte([]byte(s), '\n'); i >= 0 {
		s = s[:i] + " (and more)"
	}
	return s
}
