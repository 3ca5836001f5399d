package model

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
)

// Metadata keys under which a checkpoint records its model's shape (GPT-2's config names).
const (
	metaLayers  = "n_layer"
	metaDModel  = "n_embd"
	metaHeads   = "n_head"
	metaContext = "n_ctx"
	metaVocab   = "vocab_size"
)

// Metadata keys of the families' fields, written only for a model that is not the gpt
// family, so the default model's checkpoints keep their bytes.
const (
	metaFamily    = "family"
	metaKVHeads   = "n_kv_head"
	metaInner     = "n_inner"
	metaRopeTheta = "rope_theta"
	metaNormEps   = "norm_eps"
)

// Metadata returns the checkpoint metadata that records cfg.
func (c Config) Metadata() map[string]string {
	m := map[string]string{
		metaLayers: strconv.Itoa(c.Layers), metaDModel: strconv.Itoa(c.DModel), metaHeads: strconv.Itoa(c.Heads),
		metaContext: strconv.Itoa(c.Context), metaVocab: strconv.Itoa(c.Vocab),
	}
	if fam := c.FamilyName(); fam != jobspec.FamilyGPT {
		m[metaFamily] = string(fam)
		m[metaKVHeads] = strconv.Itoa(c.KVHeadCount())
		m[metaInner] = strconv.Itoa(c.Hidden())
		m[metaNormEps] = strconv.FormatFloat(jobspec.Model(c).Eps(), 'g', -1, 64)
		if fam == jobspec.FamilyLlama {
			m[metaRopeTheta] = strconv.FormatFloat(c.theta(), 'g', -1, 64)
		}
	}
	return m
}

var (
	blockName      = regexp.MustCompile(`^transformer\.h\.(\d+)\.`)
	llamaBlockName = regexp.MustCompile(`^model\.layers\.(\d+)\.`)
)

// ConfigFromCheckpoint recovers a model's shape from a checkpoint: the family from the
// metadata (or, without it, from the names: Llama's model.embed_tokens, GPT-2's tied head
// without lm_head), sizes from the tensor shapes, the block count from the names, heads
// from the metadata (heads overrides it when > 0, for files written elsewhere), and for
// Llama the context, rotary base and epsilon from the metadata.
func ConfigFromCheckpoint(tf *TensorFile, heads int) (Config, error) {
	if _, ok := tf.Tensors["model.embed_tokens.weight"]; ok || tf.Metadata[metaFamily] == string(jobspec.FamilyLlama) {
		return llamaConfigFromCheckpoint(tf, heads)
	}
	wte, ok := tf.Tensors["transformer.wte.weight"]
	if !ok || len(wte.Shape) != 2 {
		return Config{}, fmt.Errorf("%w: no 2-D transformer.wte.weight", ErrBadCheckpoint)
	}
	wpe, ok := tf.Tensors["transformer.wpe.weight"]
	if !ok || len(wpe.Shape) != 2 {
		return Config{}, fmt.Errorf("%w: no 2-D transformer.wpe.weight", ErrBadCheckpoint)
	}
	cfg := Config{Vocab: wte.Shape[0], DModel: wte.Shape[1], Context: wpe.Shape[0]}
	cfg.Layers = countBlocks(tf, blockName)
	if _, ok := tf.Tensors["lm_head.weight"]; !ok {
		cfg.Family = jobspec.FamilyGPT2 // GPT-2 ties lm_head to wte and does not store it
	}
	if fc, ok := tf.Tensors["transformer.h.0.mlp.c_fc.weight"]; ok && len(fc.Shape) == 2 && fc.Shape[1] != 4*cfg.DModel {
		cfg.Intermediate = fc.Shape[1]
	}
	if cfg.Family == jobspec.FamilyGPT2 {
		cfg.NormEps = metaFloat(tf, metaNormEps)
	}
	return finishConfig(tf, cfg, heads)
}

func llamaConfigFromCheckpoint(tf *TensorFile, heads int) (Config, error) {
	emb, ok := tf.Tensors["model.embed_tokens.weight"]
	if !ok || len(emb.Shape) != 2 {
		return Config{}, fmt.Errorf("%w: no 2-D model.embed_tokens.weight", ErrBadCheckpoint)
	}
	cfg := Config{Family: jobspec.FamilyLlama, Vocab: emb.Shape[0], DModel: emb.Shape[1], Layers: countBlocks(tf, llamaBlockName)}
	_, hasHead := tf.Tensors["lm_head.weight"]
	cfg.Tied = !hasHead
	ctx, err := strconv.Atoi(tf.Metadata[metaContext])
	if err != nil {
		return Config{}, fmt.Errorf("%w: metadata has no %s (Llama's positions are rotary: the context is not in the tensors)", ErrBadCheckpoint, metaContext)
	}
	cfg.Context = ctx
	if g, ok := tf.Tensors["model.layers.0.mlp.gate_proj.weight"]; ok && len(g.Shape) == 2 {
		cfg.Intermediate = g.Shape[0]
	}
	cfg.RopeTheta, cfg.NormEps = metaFloat(tf, metaRopeTheta), metaFloat(tf, metaNormEps)
	cfg, err = finishConfig(tf, cfg, heads)
	if err != nil {
		return cfg, err
	}
	if k, ok := tf.Tensors["model.layers.0.self_attn.k_proj.weight"]; ok && len(k.Shape) == 2 && k.Shape[0]%cfg.HeadDim() == 0 {
		if kv := k.Shape[0] / cfg.HeadDim(); kv != cfg.Heads {
			cfg.KVHeads = kv
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	return cfg, nil
}

// finishConfig sets the head count (heads, or the metadata's) and validates cfg.
func finishConfig(tf *TensorFile, cfg Config, heads int) (Config, error) {
	cfg.Heads = heads
	if cfg.Heads <= 0 {
		h, err := strconv.Atoi(tf.Metadata[metaHeads])
		if err != nil {
			return Config{}, fmt.Errorf("%w: metadata has no %s; give the head count explicitly", ErrBadCheckpoint, metaHeads)
		}
		cfg.Heads = h
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	return cfg, nil
}

// countBlocks is one more than the largest block index among the tensors' names.
func countBlocks(tf *TensorFile, re *regexp.Regexp) int {
	n := 0
	for name := range tf.Tensors {
		if m := re.FindStringSubmatch(name); m != nil {
			i, _ := strconv.Atoi(m[1])
			n = max(n, i+1)
		}
	}
	return n
}

// metaFloat is the metadata's number under key, 0 (the default) when absent or unreadable.
func metaFloat(tf *TensorFile, key string) float64 {
	v, err := strconv.ParseFloat(tf.Metadata[key], 64)
	if err != nil {
		return 0
	}
	return v
}

// ParamTensors maps each parameter's name to its value (shared, not copied).
func ParamTensors(params []*Param) map[string]*kernels.Tensor {
	m := make(map[string]*kernels.Tensor, len(params))
	for _, p := range params {
		m[p.Name] = p.Value
	}
	return m
}

// LoadParams copies the checkpoint's tensors into params. Every parameter must be present
// with its exact shape; the error names the first that is not. Nothing is modified unless
// all are usable.
func LoadParams(tf *TensorFile, params []*Param) error {
	for _, p := range params {
		t, ok := tf.Tensors[p.Name]
		if !ok {
			return fmt.Errorf("%w: tensor %s is missing", ErrBadCheckpoint, p.Name)
		}
		if !t.SameShape(p.Value.Shape) {
			return fmt.Errorf("%w: tensor %s has shape %v, the model needs %v", ErrBadCheckpoint, p.Name, t.Shape, p.Value.Shape)
		}
	}
	for _, p := range params {
		copy(p.Value.Data, tf.Tensors[p.Name].Data)
	}
	return nil
}
