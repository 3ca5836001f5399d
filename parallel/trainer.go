package parallel

import (
	"context"
	"fmt"
	"math"
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

// Trainer trains a whole model in one process.
type Trainer struct {
	cfg     TrainConfig
	data    *model.Dataset
	state   trainingState // resident, or offloaded under cfg.MemoryBudget
	ws      model.Workspace
	sampler model.Sampler
	valOffs []int

	step      int           // steps completed
	trainTime time.Duration // time spent in training steps since start or resume
	tokens    int           // tokens trained since start or resume
}

// NewTrainer validates cfg against data and builds the model with its initial weights.
func NewTrainer(cfg TrainConfig, data *model.Dataset) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if data.Vocab > cfg.Model.Vocab {
		return nil, fmt.Errorf("%w: %s has a vocabulary of %d, the model only %d", model.ErrBadData, data.Source, data.Vocab, cfg.Model.Vocab)
	}
	if err := data.CheckContext(cfg.Model.Context); err != nil {
		return nil, err
	}
	t := &Trainer{
		cfg: cfg, data: data,
		sampler: model.Sampler{Train: data.Train, Batch: cfg.Batch, Context: cfg.Model.Context, Seed: cfg.Seed},
		valOffs: model.ValOffsets(data.Val, cfg.Model.Context, cfg.EvalWindows),
	}
	// One process runs every micro-batch forward then backward: a one-stage pipeline's 1F1B.
	state, err := newTrainingState(cfg, 0, cfg.Model.NumLayers(), cfg.MemoryBudget, cfg.Recompute, true,
		stageOps(jobspec.Schedule1F1B, 0, 1, cfg.MicroBatches))
	if err != nil {
		return nil, err
	}
	t.state = state
	return t, nil
}

// Close releases the trainer's offload store (its file is already unlinked); a trainer
// without a memory budget holds nothing to release.
func (t *Trainer) Close() error { return t.state.Close() }

// OffloadStats returns the offload store's counters, and false without a memory budget.
func (t *Trainer) OffloadStats() (offload.Stats, bool) { return t.state.Stats() }

// Model is the model being trained. Under a memory budget its parameters' Data is bound
// only while the offload store pins their chunks (nil otherwise): read the weights through
// a checkpoint (SaveCheckpoint) instead.
func (t *Trainer) Model() *model.GPT {
	return &model.GPT{Config: t.cfg.Model, Layers: t.state.Layers()}
}

// StepsDone is the number of completed steps.
func (t *Trainer) StepsDone() int { return t.step }

// Step runs one training step (all micro-batches, clipping, AdamW) and returns its mean
// training loss. An error is the offload store's: the training state is lost.
func (t *Trainer) Step() (float64, error) {
	start := time.Now()
	M := t.cfg.MicroBatches
	if err := t.state.BeginStep(); err != nil {
		return 0, err
	}
	defer t.state.EndStep()
	var loss float64
	for m := 0; m < M; m++ {
		t.ws.Reset()
		mb := t.sampler.MicroBatch(t.step, m, M)
		l, err := t.forwardBackward(mb, m, 1/float32(M))
		if err != nil {
			return 0, err
		}
		loss += float64(l)
	}
	lr := LearningRate(t.step, t.cfg.LR, t.cfg.Warmup, t.cfg.Steps)
	if ss := t.state.GradSumSquares(); !math.IsNaN(ss) && !math.IsInf(ss, 0) {
		// a non-finite gradient skips the update rather than disabling clipping
		if err := t.state.Update(lr, ss); err != nil {
			return 0, err
		}
	}
	t.step++
	t.trainTime += time.Since(start)
	t.tokens += t.cfg.Batch * t.cfg.Model.Context
	return loss / float64(M), nil
}

// forwardBackward is model.ForwardBackward through the training state.
func (t *Trainer) forwardBackward(mb *model.Batch, m int, weight float32) (float32, error) {
	L := len(t.state.Layers())
	var x []float32
	var err error
	saved := make([]model.Saved, L)
	for i := 0; i < L; i++ {
		if x, saved[i], err = t.state.Forward(&t.ws, mb, m, i, x); err != nil {
			return 0, err
		}
	}
	loss := x[0]
	dy := []float32{weight}
	for i := L - 1; i >= 0; i-- {
		if dy, err = t.state.Backward(&t.ws, mb, m, i, saved[i], dy); err != nil {
			return 0, err
		}
	}
	return loss, nil
}

// ActivationPeakBytes is the most activation memory a training step has held: the peak of
// the step workspace, plus the recomputation scratch's when the trainer recomputes.
func (t *Trainer) ActivationPeakBytes() int64 {
	return t.ws.PeakBytes() + model.ScratchPeakBytes(t.state.Layers())
}

// Evaluate returns the validation loss: the mean over the K windows of each window's mean
// cross-entropy, evaluated Batch windows at a time.
func (t *Trainer) Evaluate() (float64, error) {
	T := t.cfg.Model.Context
	var total float64
	for i := 0; i < len(t.valOffs); i += t.cfg.Batch {
		t.ws.Reset()
		chunk := t.valOffs[i:min(len(t.valOffs), i+t.cfg.Batch)]
		mb := model.ValBatch(t.data.Val, chunk, T)
		mb.RowLoss = make([]float64, mb.Rows())
		var x []float32
		var err error
		for l := range t.state.Layers() {
			if x, err = t.state.EvalForward(&t.ws, mb, l, x); err != nil {
				return 0, fmt.Errorf("evaluation: %w", err)
			}
		}
		for w := range chunk {
			var s float64
			for _, l := range mb.RowLoss[w*T : (w+1)*T] {
				s += l
			}
			total += s / float64(T)
		}
	}
	return total / float64(len(t.valOffs)), nil
}

// TokensPerSec is the training throughput since the trainer started or resumed.
func (t *Trainer) TokensPerSec() float64 {
	if t.trainTime <= 0 {
		return 0
	}
	return float64(t.tokens) / t.trainTime.Seconds()
}

// trainerSteps drives a Trainer in the training loop.
type trainerSteps struct{ t *Trainer }

func (s trainerSteps) StepsDone() int                        { return s.t.step }
func (s trainerSteps) Step(context.Context) (float64, error) { return s.t.Step() }

// Run trains from the current step up to stopAt (≤ cfg.Steps; 0 means cfg.Steps),
// calling emit after every step, and evaluating every EvalEvery steps and at the last
// step of the schedule. It returns ctx's error if cancelled between steps; the model is
// then in a consistent state after its last completed step.
func (t *Trainer) Run(ctx context.Context, stopAt int, emit func(Event)) error {
	err := TrainLoop(ctx, trainerSteps{t}, t.cfg, stopAt, Hooks{
		Evaluate: func(_ context.Context, step int, loss float64) error {
			val, err := t.Evaluate()
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
	val, err := t.Evaluate()
	if err != nil {
		return err
	}
	emit(Event{Kind: "done", Step: t.step, ValLoss: val, HasVal: true, TokensPerSec: t.TokensPerSec()})
	return nil
}

// emitStep is the progress hook of Trainer.Run and LocalRun.Run: a step event.
func emitStep(emit func(Event)) func(context.Context, int, float64) error {
	return func(_ context.Context, step int, loss float64) error {
		emit(Event{Kind: "step", Step: step, TrainLoss: loss})
		return nil
	}
}
