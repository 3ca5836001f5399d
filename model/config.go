package model

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Config is the shape of a GPT. Its fields, their JSON and YAML names and their defaults
// are the job spec's model section (jobspec.Model), defined there once: a job stored in the
// control plane and a model built from it cannot disagree. Config adds what the model
// computes from the shape.
type Config jobspec.Model

// DefaultConfig is the default model of docs/gpt.md: 4 layers, d 128, 4 heads, context
// 128, byte vocabulary (jobspec.DefaultModel).
func DefaultConfig() Config { return Config(jobspec.DefaultModel()) }

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
