package parallel

import (
	"context"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// Event reports progress of a training run.
type Event struct {
	// Kind is "step" after every step and "done" once at the end.
	Kind string
	// Step is the number of steps completed.
	Step int
	// TrainLoss is the step's mean training loss (step events).
	TrainLoss float64
	// ValLoss is set on evaluation steps and at the end; HasVal says whether it is.
	ValLoss float64
	HasVal  bool
	// TokensPerSec is the training throughput so far, excluding evaluation, on evaluation
	// steps and at the end.
	TokensPerSec float64
	// PipelineBytes and SyncBytes are the payload bytes sent so far between pipeline stages
	// and between replicas (distributed runs, on evaluation steps and at the end: HasBytes).
	PipelineBytes, SyncBytes int64
	HasBytes                 bool
}

// Trainer trains a whole model in one process: a plan of one stage and one replica (the
// degenerate pipeline, as llm.c's ZeRO makes one process the degenerate case of the
// sharded path), run by the same Worker as every split and distributed run over a
// transport without peers. It adds what `meshnode train` needs around the worker:
// throughput, and checkpoints of a whole model in a directory.
type Trainer struct {
	cfg TrainConfig
	w   *Worker

	trainTime time.Duration // time spent in training steps since start or resume
	tokens    int           // tokens trained since start or resume
}

// soloNode names the one worker of a single-process run.
const soloNode = "local"

// SingleProcessPlan is the plan of a single-process run of cfg: one stage of every layer,
// one replica, recomputing and under a memory budget as cfg asks.
func SingleProcessPlan(cfg TrainConfig) Plan {
	return Plan{Replicas: [][]StagePlan{{{Node: soloNode, First: 0, Last: cfg.Model.NumLayers(),
		Recompute: cfg.Recompute, MemoryBudget: cfg.MemoryBudget}}}}
}

// NewTrainer validates cfg against data and builds the model with its initial weights.
func NewTrainer(cfg TrainConfig, data *model.Dataset) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if data.Vocab > cfg.Model.Vocab {
		return nil, fmt.Errorf("%w: %s has a vocabulary of %d, the model only %d", model.ErrBadData, data.Source, data.Vocab, cfg.Model.Vocab)
	}
	// One process runs every micro-batch forward then backward: a one-stage pipeline's 1F1B.
	job := JobConfig{Train: cfg, Schedule: jobspec.Schedule1F1B,
		Sync: SyncConfig{Mode: jobspec.SyncEveryStep, Codec: jobspec.CodecNone}}
	w, err := NewWorker(job, SingleProcessPlan(cfg), soloNode, soloTransport{}, data)
	if err != nil {
		return nil, err
	}
	return &Trainer{cfg: cfg, w: w}, nil
}

// Close releases the trainer's training state (an offload store; its file is already
// unlinked).
func (t *Trainer) Close() error { return t.w.Close() }

// OffloadStats returns the offload store's counters, and false without a memory budget.
func (t *Trainer) OffloadStats() (offload.Stats, bool) { return t.w.OffloadStats() }

// Model is the model being trained. Under a memory budget its parameters' Data is bound
// only while the offload store pins their chunks (nil otherwise): read the weights through
// a checkpoint (SaveCheckpoint) instead.
func (t *Trainer) Model() *model.GPT { return &model.GPT{Config: t.cfg.Model, Layers: t.w.Layers()} }

// StepsDone is the number of completed steps.
func (t *Trainer) StepsDone() int { return t.w.StepsDone() }

// Step runs one training step (all micro-batches, clipping, AdamW) and returns its mean
// training loss. An error is the offload store's: the training state is lost.
func (t *Trainer) Step(ctx context.Context) (float64, error) {
	start := time.Now()
	res, err := t.w.Step(ctx)
	if err != nil {
		return 0, err
	}
	t.trainTime += time.Since(start)
	t.tokens += t.cfg.Batch * t.cfg.Model.Context
	return res.Loss, nil
}

// ActivationPeakBytes is the most activation memory a training step has held: the peak of
// the step workspace, plus the recomputation scratch's when the trainer recomputes.
func (t *Trainer) ActivationPeakBytes() int64 { return t.w.ActivationPeakBytes() }

// Evaluate returns the validation loss: the mean over the K windows of each window's mean
// cross-entropy, evaluated Batch windows at a time.
func (t *Trainer) Evaluate(ctx context.Context) (float64, error) {
	loss, _, err := t.w.Evaluate(ctx)
	return loss, err
}

// TokensPerSec is the training throughput since the trainer started or resumed.
func (t *Trainer) TokensPerSec() float64 {
	if t.trainTime <= 0 {
		return 0
	}
	return float64(t.tokens) / t.trainTime.Seconds()
}

// Run trains from the current step up to stopAt (≤ cfg.Steps; 0 means cfg.Steps),
// calling checkpoint (if not nil) and then emit after every step, and evaluating every
// EvalEvery steps and at the last step of the schedule. It returns ctx's error if
// cancelled between steps, and a checkpoint's error; the model is then in a consistent
// state after its last completed step.
func (t *Trainer) Run(ctx context.Context, stopAt int, checkpoint func(ctx context.Context, step int) error, emit func(Event)) error {
	err := TrainLoop(ctx, t, t.cfg, stopAt, Hooks{
		Checkpoint: checkpoint,
		Evaluate: func(ctx context.Context, step int, loss float64) error {
			val, err := t.Evaluate(ctx)
			if err != nil {
				return err
			}
			emit(Event{Kind: "step", Step: step, TrainLoss: loss, ValLoss: val, HasVal: true, TokensPerSec: t.TokensPerSec()})
			return nil
		},
		Progress: emitStep(emit),
	})
	if err != nil {
		return err
	}
	val, err := t.Evaluate(ctx)
	if err != nil {
		return err
	}
	emit(Event{Kind: "done", Step: t.StepsDone(), ValLoss: val, HasVal: true, TokensPerSec: t.TokensPerSec()})
	return nil
}

// emitStep is the progress hook of Trainer.Run and LocalRun.Run: a step event.
func emitStep(emit func(Event)) func(context.Context, int, float64) error {
	return func(_ context.Context, step int, loss float64) error {
		emit(Event{Kind: "step", Step: step, TrainLoss: loss})
		return nil
	}
}
