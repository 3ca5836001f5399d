package model

import (
	"errors"
	"fmt"
)

// Config is the shape of a GPT. DefaultConfig gives the spec's defaults.
type Config struct {
	// Layers is the number of transformer blocks (≥ 1).
	Layers int `json:"layers" yaml:"layers"`
	// DModel is the embedding width (≥ 1, divisible by Heads).
	DModel int `json:"d_model" yaml:"d_model"`
	// Heads is the number of attention heads (≥ 1).
	Heads int `json:"heads" yaml:"heads"`
	// Context is the sequence length T, the number of positions in wpe (≥ 1).
	Context int `json:"context" yaml:"context"`
	// Vocab is the vocabulary size V: 256 for byte tokens.
	Vocab int `json:"vocab" yaml:"vocab"`
}

// DefaultConfig is the default model of GPT_SPEC.md: 4 layers, d 128, 4 heads, context 128,
// byte vocabulary.
func DefaultConfig() Config {
	return Config{Layers: 4, DModel: 128, Heads: 4, Context: 128, Vocab: 256}
}

// Validate reports every field that cannot describe a GPT, each error naming its field.
func (c Config) Validate() error {
	var errs []error
	pos := func(name string, v int) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be ≥ 1 (got %d)", name, v))
		}
	}
	pos("layers", c.Layers)
	pos("d-model", c.DModel)
	pos("heads", c.Heads)
	pos("context", c.Context)
	pos("vocab", c.Vocab)
	if c.DModel >= 1 && c.Heads >= 1 && c.DModel%c.Heads != 0 {
		errs = append(errs, fmt.Errorf("d-model (%d) must be divisible by heads (%d)", c.DModel, c.Heads))
	}
	if c.Vocab > 1<<16 {
		errs = append(errs, fmt.Errorf("vocab must be ≤ 65536 (got %d): tokens are uint16", c.Vocab))
	}
	return errors.Join(errs...)
}

// HeadDim is DModel / Heads.
func (c Config) HeadDim() int { return c.DModel / c.Heads }

// NumLayers is the length of the model's layer list: the embedding, Layers blocks and the
// head. Pipeline stages are contiguous ranges of [0, NumLayers()).
func (c Config) NumLayers() int { return c.Layers + 2 }
