package parallel

import (
	"errors"
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// TrainConfig is one training run: the model, the data and the recipe of docs/gpt.md.
// DefaultTrainConfig gives its defaults.
type TrainConfig struct {
	Model model.Config `json:"model"`
	// Data is the corpus: builtin:gostd, a text file, or a nanoGPT .bin pair.
	Data string `json:"data"`
	// Batch is B, sequences per step; MicroBatches splits them into M parts whose
	// gradients accumulate, each weighted by its share of B (a single process needs equal
	// parts, B divisible by M; a pipeline stage takes any M ≤ B).
	Batch        int `json:"batch"`
	MicroBatches int `json:"micro_batches"`
	// Steps is the length of the schedule.
	Steps int `json:"steps"`
	// LR is the peak learning rate; Warmup the steps of linear warm-up.
	LR     float64 `json:"lr"`
	Warmup int     `json:"warmup"`
	Seed   uint64  `json:"seed"`
	// EvalEvery evaluates every so many steps (and at the last); 0 only at the last.
	EvalEvery int `json:"eval_every"`
	// EvalWindows is K, the number of validation windows.
	EvalWindows int `json:"eval_windows"`
	// AdamW's β1, β2, ε, weight decay, and the gradient clipping norm (0: no clipping).
	Beta1       float64 `json:"beta1"`
	Beta2       float64 `json:"beta2"`
	Eps         float64 `json:"eps"`
	WeightDecay float64 `json:"weight_decay"`
	ClipNorm    float64 `json:"clip_norm"`
	// Recompute trains with activation recomputation (model.WithRecompute): less activation
	// memory for one more forward pass; the same losses and gradients. It reaches a
	// worker only through its plan entry (StagePlan.Recompute): SingleProcessPlan and
	// `meshnode train --stages` copy it into every stage's.
	Recompute bool `json:"recompute,omitempty"`
	// MemoryBudget, when > 0, is the bytes of training state (weights, gradients, AdamW
	// moments) a single-process run keeps resident; the rest lives in chunks in a file in
	// OffloadDir (docs/memory.md, Knob 4). Same losses. Like Recompute it reaches a worker
	// only through its plan entry (StagePlan.MemoryBudget, set by SingleProcessPlan).
	// Neither is part of a checkpoint: they describe the machine, not the run.
	MemoryBudget int64  `json:"-"`
	OffloadDir   string `json:"-"`
	// Backend computes every stage's layers (model.Workspace.Backend); nil is the CPU. A
	// backend whose tensors are in device memory runs plans of one stage per process
	// (pipeline activations arrive as host slices). Like MemoryBudget it describes the
	// machine and is not part of a checkpoint.
	Backend device.Backend `json:"-"`
	// DiskFree reports the bytes available in a directory's file system, −1 when it cannot
	// tell; an offload store is refused before anything is written when its file does not
	// fit jobspec.OffloadDiskRoom of it. Nil: the file system's own (offload.FreeBytes).
	DiskFree func(dir string) int64 `json:"-"`
	// Init, when set, replaces the initial weights with a checkpoint's (ReadInitWeights: a
	// .safetensors file or a checkpoint directory) before training: the base a fine-tune
	// starts from. Empty: the seed's initialisation.
	Init string `json:"init,omitempty"`
	// LoRA, when set, trains low-rank adapters on the frozen base instead of every weight:
	// only the adapters have gradients, AdamW state, synchronisation and checkpoints
	// (docs/lora.md). The base comes from Init (every resume reads it again).
	LoRA *jobspec.LoRA `json:"lora,omitempty"`
}

// DefaultTrainConfig is docs/gpt.md's recipe: the default model on builtin:gostd, batch
// 16, 300 steps, lr 2e-3 with 30 warm-up steps, seed 1, AdamW (0.9, 0.95, 1e-8, decay 0.1),
// clipping at 1.0, evaluation every 100 steps on 128 windows.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{
		Model: model.DefaultConfig(), Data: model.BuiltinGoStd,
		Batch: 16, MicroBatches: 1, Steps: 300, LR: 2e-3, Warmup: 30, Seed: 1,
		EvalEvery: 100, EvalWindows: 128,
		Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, ClipNorm: 1.0,
	}
}

// Validate reports every unusable field, each error naming it (as the train command's flag).
// A single process splits the batch into equal micro-batches, so MicroBatches must divide
// Batch.
func (c TrainConfig) Validate() error {
	return c.validate(true)
}

// validateStage is Validate for a pipeline stage: its micro-batches may be unequal (the
// planner picks any count up to the batch, and a replica's share of the batch need not
// divide by it), because a stage weighs each micro-batch's gradient by its rows' share of
// the replica's batch.
func (c TrainConfig) validateStage() error {
	return c.validate(false)
}

func (c TrainConfig) validate(equalMicroBatches bool) error {
	var errs []error
	if err := c.Model.Validate(); err != nil {
		errs = append(errs, err)
	}
	pos := func(name string, v int) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be ≥ 1 (got %d)", name, v))
		}
	}
	pos("batch", c.Batch)
	pos("micro-batches", c.MicroBatches)
	pos("steps", c.Steps)
	pos("eval-windows", c.EvalWindows)
	if equalMicroBatches && c.Batch >= 1 && c.MicroBatches >= 1 && c.Batch%c.MicroBatches != 0 {
		errs = append(errs, fmt.Errorf("batch (%d) must be divisible by micro-batches (%d)", c.Batch, c.MicroBatches))
	}
	if !(c.LR > 0) {
		errs = append(errs, fmt.Errorf("lr must be > 0 (got %g)", c.LR))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup must be ≥ 0 (got %d)", c.Warmup))
	}
	if c.EvalEvery < 0 {
		errs = append(errs, fmt.Errorf("eval-every must be ≥ 0 (got %d)", c.EvalEvery))
	}
	if c.Data == "" {
		errs = append(errs, errors.New("data must name a corpus (builtin:gostd or a file)"))
	}
	if c.MemoryBudget < 0 {
		errs = append(errs, fmt.Errorf("memory-budget must be ≥ 0 (got %d)", c.MemoryBudget))
	}
	if c.MemoryBudget > 0 && c.OffloadDir == "" {
		errs = append(errs, errors.New("memory-budget needs data-dir: the directory of the offload file"))
	}
	errs = append(errs, c.validateLoRA()...)
	return errors.Join(errs...)
}

func (c TrainConfig) adamW() kernels.AdamW {
	return kernels.AdamW{Beta1: c.Beta1, Beta2: c.Beta2, Eps: c.Eps, WeightDecay: c.WeightDecay}
}
