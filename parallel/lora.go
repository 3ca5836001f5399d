package parallel

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/meshnode/meshnode/model"
)

// stageLayers builds a stage's layers [first, last) as cfg asks: initialised from the
// seed, their weights then replaced by cfg.Init's when set, recomputed when recompute,
// and with cfg.LoRA's adapters on a frozen base when set (docs/lora.md). Every path that
// builds a resident stage comes here, so a worker of any plan, a single process and an
// export see the same model.
func stageLayers(cfg TrainConfig, first, last int, recompute bool) ([]model.Layer, error) {
	layers := model.NewLayers(cfg.Model, cfg.Seed, first, last)
	if cfg.Init != "" {
		tf, err := ReadInitWeights(cfg.Init)
		if err != nil {
			return nil, err
		}
		if err := model.LoadParams(tf, model.LayerParams(layers)); err != nil {
			return nil, fmt.Errorf("init %s: %w", cfg.Init, err)
		}
	}
	if recompute {
		layers = model.WithRecompute(layers)
	}
	if cfg.LoRA == nil {
		return layers, nil
	}
	return model.WithLoRA(cfg.Model, layers, *cfg.LoRA, cfg.Seed)
}

// ReadInitWeights reads the initial weights named by path: a .safetensors file (GPT-2 or
// Hugging Face Llama names), a checkpoint's step-N directory, or a directory of them (the
// latest step's). A LoRA run's own checkpoints hold adapters only and are no base.
func ReadInitWeights(path string) (*model.TensorFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	file := path
	if st.IsDir() && model.IsHFDir(path) {
		m, err := model.LoadHF(path)
		if err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		return m.Weights, nil
	}
	if st.IsDir() {
		dir, err := latestStepDir(path)
		if err != nil {
			return nil, fmt.Errorf("init: %w", err)
		}
		file = filepath.Join(dir, ModelFile)
	}
	tf, err := model.ReadSafetensors(file)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	return tf, nil
}

// validateLoRA checks cfg's LoRA and init fields, each error naming the flag.
func (c TrainConfig) validateLoRA() []error {
	var errs []error
	if c.LoRA != nil {
		if err := c.LoRA.Check("lora", c.Model.FamilyName()); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.Init) > 4096 {
		errs = append(errs, fmt.Errorf("init: a path of at most 4096 bytes, got %d", len(c.Init)))
	}
	return errs
}

// TrainableParams is the number of parameters a run of cfg trains (the adapters' alone
// under LoRA) and the model's total, both from the shape.
func (c TrainConfig) TrainableParams() (trainable, total int64, err error) {
	for _, lc := range c.Model.LayerCosts() {
		total += lc.ParamBytes / 4
	}
	if c.LoRA == nil {
		return total, total, nil
	}
	trainable, err = model.LoRAParamCount(c.Model, *c.LoRA)
	return trainable, total + trainable, err
}

// CheckpointModel builds the whole model a checkpoint of `meshnode train` describes: its
// configuration's layers (the init weights and, under LoRA, the adapters on the frozen
// base) with the checkpoint's trained tensors loaded (under LoRA, the adapters).
func CheckpointModel(ck *Checkpoint) (*model.GPT, error) {
	cfg := ck.Config.Model
	layers, err := stageLayers(ck.Config, 0, cfg.NumLayers(), false)
	if err != nil {
		return nil, err
	}
	if err := model.LoadParams(ck.Model, model.LayerParams(layers)); err != nil {
		return nil, fmt.Errorf("%s: %w", ck.Dir, err)
	}
	return &model.GPT{Config: cfg, Layers: layers}, nil
}
