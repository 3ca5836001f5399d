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
	gpt     *model.GPT
	layers  []model.Layer // gpt's layers, wrapped for recomputation when cfg.Recompute
	opt     *Optimizer
	off     *offloadState // the training state's chunk store, under cfg.MemoryBudget
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
	if cfg.MemoryBudget > 0 {
		if err := t.offload(); err != nil {
			return nil, err
		}
		return t, nil
	}
	t.gpt = model.New(cfg.Model, cfg.Seed)
	t.layers = t.gpt.Layers
	if cfg.Recompute {
		t.layers = model.WithRecompute(t.layers)
	}
	t.opt = NewOptimizer(t.gpt.Params(), cfg.adamW(), cfg.ClipNorm)
	return t, nil
}

// offload builds the model's training state in a chunk store under cfg.MemoryBudget:
// layers whose parameters are bound only while pinned, wrapped to pin them.
func (t *Trainer) offload() error {
	shells := model.NewLayerShells(t.cfg.Model, 0, t.cfg.Model.NumLayers())
	// One process runs every micro-batch forward then backward: a one-stage pipeline's 1F1B.
	st, err := newOffloadState(t.cfg, shells, 0, stageOps(jobspec.Schedule1F1B, 0, 1, t.cfg.MicroBatches))
	if err != nil {
		return err
	}
	t.gpt, t.off, t.opt = &model.GPT{Config: t.cfg.Model, Layers: shells}, st, st.opt
	inner := shells
	if t.cfg.Recompute {
		inner = model.WithRecompute(inner)
	}
	for i, l := range inner {
		t.layers = append(t.layers, &offloadedLayer{Layer: l, st: st, index: i})
	}
	return nil
}

// Close releases the trainer's offload store (its file is already unlinked); a trainer
// without a memory budget holds nothing to release.
func (t *Trainer) Close() error { return t.off.close() }

// OffloadStats returns the offload store's counters, and false without a memory budget.
func (t *Trainer) OffloadStats() (offload.Stats, bool) { return t.off.stats() }

// Model is the model being trained. Under a memory budget its parameters' Data is bound
// only while the offload store pins their chunks (nil otherwise): read the weights through
// a checkpoint (SaveCheckpoint) instead.
func (t *Trainer) Model() *model.GPT { return t.gpt }

// StepsDone is the number of completed steps.
func (t *Trainer) StepsDone() int { return t.step }

// Step runs one training step (all micro-batches, clipping, AdamW) and returns its mean
// training loss.
func (t *Trainer) Step() float64 {
	if t.off != nil {
		return t.stepOffloaded()
	}
	start := time.Now()
	M := t.cfg.MicroBatches
	model.ZeroGrads(t.layers)
	var loss float64
	for m := 0; m < M; m++ {
		t.ws.Reset()
		mb := t.sampler.MicroBatch(t.step, m, M)
		loss += float64(model.ForwardBackward(&t.ws, t.layers, mb, 1/float32(M)))
	}
	lr := LearningRate(t.step, t.cfg.LR, t.cfg.Warmup, t.cfg.Steps)
	if ss := t.opt.GradSumSquares(); !math.IsNaN(ss) && !math.IsInf(ss, 0) {
		t.opt.Step(lr, ss) // a non-finite gradient skips the update rather than disabling clipping
	}
	t.step++
	t.trainTime += time.Since(start)
	t.tokens += t.cfg.Batch * t.cfg.Model.Context
	return loss / float64(M)
}

// stepOffloaded is Step with the training state in the chunk store: the same arithmetic
// in the same order, the chunks pinned by the schedule. It panics with an
// *offload.IOError if the store's file fails (Run returns it as an error).
func (t *Trainer) stepOffloaded() float64 {
	start := time.Now()
	st, M := t.off, t.cfg.MicroBatches
	st.zeroGrads()
	st.store.BeginStep()
	defer st.store.EndStep()
	st.inStep = true
	defer func() { st.inStep = false }()
	var loss float64
	for m := 0; m < M; m++ {
		st.micro = m
		t.ws.Reset()
		mb := t.sampler.MicroBatch(t.step, m, M)
		loss += float64(model.ForwardBackward(&t.ws, t.layers, mb, 1/float32(M)))
	}
	lr := LearningRate(t.step, t.cfg.LR, t.cfg.Warmup, t.cfg.Steps)
	if ss := st.gradSumSquares(); !math.IsNaN(ss) && !math.IsInf(ss, 0) {
		st.optimizerStep(lr, ss)
	}
	t.step++
	t.trainTime += time.Since(start)
	t.tokens += t.cfg.Batch * t.cfg.Model.Context
	return loss / float64(M)
}

// ActivationPeakBytes is the most activation memory a training step has held: the peak of
// the step workspace, plus the recomputation scratch's when the trainer recomputes.
func (t *Trainer) ActivationPeakBytes() int64 {
	return t.ws.PeakBytes() + model.ScratchPeakBytes(t.layers)
}

// Evaluate returns the validation loss: the mean over the K windows of each window's mean
// cross-entropy, evaluated Batch windows at a time.
func (t *Trainer) Evaluate() float64 {
	return Evaluate(&t.ws, t.layers, t.data.Val, t.valOffs, t.cfg.Model.Context, t.cfg.Batch)
}

// Evaluate computes the validation loss of a whole model over the windows offs.
func Evaluate(ws *model.Workspace, layers []model.Layer, val model.Tokens, offs []int, T, batch int) float64 {
	var total float64
	for i := 0; i < len(offs); i += batch {
		ws.Reset()
		chunk := offs[i:min(len(offs), i+batch)]
		mb := model.ValBatch(val, chunk, T)
		mb.RowLoss = make([]float64, mb.Rows())
		model.Loss(ws, layers, mb)
		for w := range chunk {
			var s float64
			for _, l := range mb.RowLoss[w*T : (w+1)*T] {
				s += l
			}
			total += s / float64(T)
		}
	}
	return total / float64(len(offs))
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

func (s trainerSteps) StepsDone() int { return s.t.step }
func (s trainerSteps) Step(context.Context) (loss float64, err error) {
	defer func() {
		if r := recover(); r != nil {
			ioErr, ok := r.(*offload.IOError)
			if !ok {
				panic(r)
			}
			err = ioErr
		}
	}()
	return s.t.Step(), nil
}

// Run trains from the current step up to stopAt (≤ cfg.Steps; 0 means cfg.Steps),
// calling emit after every step, and evaluating every EvalEvery steps and at the last
// step of the schedule. It returns ctx's error if cancelled between steps; the model is
// then in a consistent state after its last completed step.
func (t *Trainer) Run(ctx context.Context, stopAt int, emit func(Event)) error {
	err := TrainLoop(ctx, trainerSteps{t}, t.cfg, stopAt, Hooks{
		Evaluate: func(_ context.Context, step int, loss float64) error {
			emit(Event{Kind: "step", Step: step, TrainLoss: loss, ValLoss: t.Evaluate(), HasVal: true, TokensPerSec: t.TokensPerSec()})
			return nil
		},
		Progress: emitStep(emit),
	})
	if err != nil {
		return err
	}
	emit(Event{Kind: "done", Step: t.step, ValLoss: t.Evaluate(), HasVal: true, TokensPerSec: t.TokensPerSec()})
	return nil
}

// emitStep is the progress hook of Trainer.Run and LocalRun.Run: a step event.
func emitStep(emit func(Event)) func(context.Context, int, float64) error {
	return func(_ context.Context, step int, loss float64) error {
		emit(Event{Kind: "step", Step: step, TrainLoss: loss})
		return nil
	}
}
