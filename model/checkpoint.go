package model

import (
	"fmt"
	"regexp"
	"strconv"

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

// Metadata returns the checkpoint metadata that records cfg.
func (c Config) Metadata() map[string]string {
	return map[string]string{
		metaLayers: strconv.Itoa(c.Layers), metaDModel: strconv.Itoa(c.DModel), metaHeads: strconv.Itoa(c.Heads),
		metaContext: strconv.Itoa(c.Context), metaVocab: strconv.Itoa(c.Vocab),
	}
}

var blockName = regexp.MustCompile(`^transformer\.h\.(\d+)\.`)

// ConfigFromCheckpoint recovers a model's shape from a checkpoint: sizes from the tensor
// shapes, the block count from the names, heads from the metadata (heads overrides it when
// > 0, for files written elsewhere).
func ConfigFromCheckpoint(tf *TensorFile, heads int) (Config, error) {
	wte, ok := tf.Tensors["transformer.wte.weight"]
	if !ok || len(wte.Shape) != 2 {
		return Config{}, fmt.Errorf("%w: no 2-D transformer.wte.weight", ErrBadCheckpoint)
	}
	wpe, ok := tf.Tensors["transformer.wpe.weight"]
	if !ok || len(wpe.Shape) != 2 {
		return Config{}, fmt.Errorf("%w: no 2-D transformer.wpe.weight", ErrBadCheckpoint)
	}
	cfg := Config{Vocab: wte.Shape[0], DModel: wte.Shape[1], Context: wpe.Shape[0]}
	for name := range tf.Tensors {
		if m := blockName.FindStringSubmatch(name); m != nil {
			i, _ := strconv.Atoi(m[1])
			cfg.Layers = max(cfg.Layers, i+1)
		}
	}
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
