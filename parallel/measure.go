package parallel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/meshnode/meshnode/model"
)

// TrainingMeasurement is the throughput of single-process training at one model shape.
type TrainingMeasurement struct {
	Steps        int           `json:"steps"`
	Elapsed      time.Duration `json:"elapsed_ns"`
	TokensPerSec float64       `json:"tokens_per_sec"`
}

// MeasureTraining trains a freshly initialised model of shape cfg on a synthetic byte corpus
// (batch sequences of cfg.Context tokens, micro micro-batches) for at least minDur after one
// warm-up step, and reports tokens per second. It is the measurement behind
// `meshnode bench --train`.
func MeasureTraining(cfg model.Config, batch, micro int, minDur time.Duration) (TrainingMeasurement, error) {
	tr, err := NewReferenceTrainer(cfg, batch, micro)
	if err != nil {
		return TrainingMeasurement{}, err
	}
	defer tr.Close()
	if _, err := tr.Step(context.Background()); err != nil {
		return TrainingMeasurement{}, fmt.Errorf("measure training: %w", err)
	}
	start := time.Now()
	steps := 0
	for steps == 0 || time.Since(start) < minDur {
		if _, err := tr.Step(context.Background()); err != nil {
			return TrainingMeasurement{}, fmt.Errorf("measure training: %w", err)
		}
		steps++
	}
	el := time.Since(start)
	return TrainingMeasurement{Steps: steps, Elapsed: el, TokensPerSec: float64(steps*batch*cfg.Context) / el.Seconds()}, nil
}

// NewReferenceTrainer is MeasureTraining's trainer: a freshly initialised model of shape
// cfg on a synthetic byte corpus, batch sequences a step in micro micro-batches, for a
// caller that times its steps itself (the device profile interleaves two shapes).
func NewReferenceTrainer(cfg model.Config, batch, micro int) (*Trainer, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := max(1<<18, 4*cfg.Context)
	text := make([]byte, n)
	for i := range text {
		text[i] = byte(32 + rng.IntN(95))
	}
	cut := n * 9 / 10
	data := &model.Dataset{Source: "synthetic", Train: model.ByteTokens(text[:cut]), Val: model.ByteTokens(text[cut:]), Vocab: min(256, cfg.Vocab)}
	tc := DefaultTrainConfig()
	tc.Model, tc.Batch, tc.MicroBatches, tc.Steps, tc.EvalWindows = cfg, batch, micro, 1<<30, 1
	tr, err := NewTrainer(tc, data)
	if err != nil {
		return nil, fmt.Errorf("measure training: %w", err)
	}
	return tr, nil
}
