package model

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
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
	m := jobspec.Model(c)
	if err := m.Family.Check("family"); err != nil {
		errs = append(errs, err)
	}
	if kv := m.KVHeadCount(); c.Heads >= 1 && (kv < 1 || c.Heads%kv != 0) {
		errs = append(errs, fmt.Errorf("kv-heads (%d) must divide heads (%d)", kv, c.Heads))
	} else if kv != c.Heads && c.Family != jobspec.FamilyLlama {
		errs = append(errs, fmt.Errorf("kv-heads (%d) needs family llama", kv))
	}
	if c.Intermediate < 0 {
		errs = append(errs, fmt.Errorf("intermediate must be ≥ 0 (got %d)", c.Intermediate))
	}
	if c.Tied && c.FamilyName() == jobspec.FamilyGPT {
		errs = append(errs, errors.New("tied needs family gpt2 or llama: the gpt family's head is untied"))
	}
	if c.Family == jobspec.FamilyLlama && c.DModel >= 1 && c.Heads >= 1 && c.HeadDim()%2 != 0 {
		errs = append(errs, fmt.Errorf("head width d-model/heads (%d) must be even for rotary positions", c.HeadDim()))
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

// FamilyName is the architecture, jobspec.FamilyGPT when Family is "".
func (c Config) FamilyName() jobspec.Family { return jobspec.Model(c).FamilyName() }

// KVHeadCount is the number of key/value heads (Heads unless grouped-query attention).
func (c Config) KVHeadCount() int { return jobspec.Model(c).KVHeadCount() }

// Hidden is the MLP's hidden width (4·DModel unless Intermediate is set).
func (c Config) Hidden() int { return jobspec.Model(c).Hidden() }

// TiedHead reports whether lm_head is the token embedding.
func (c Config) TiedHead() bool { return jobspec.Model(c).TiedHead() }

// normEps is the normalisations' epsilon: LayerNorm's fixed 1e-5 for the gpt family,
// NormEps (default 1e-5) otherwise.
func (c Config) normEps() float32 {
	if c.FamilyName() == jobspec.FamilyGPT {
		return kernels.LayerNormEps
	}
	return float32(jobspec.Model(c).Eps())
}

// theta is the rotary base (10000 unless RopeTheta is set).
func (c Config) theta() float64 { return jobspec.Model(c).Theta() }
