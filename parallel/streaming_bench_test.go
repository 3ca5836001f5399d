package parallel

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// BenchmarkStreamingSyncEvents trains the default model (4 layers, d 128, context 128) on
// builtin:gostd as 2 replicas of one stage (batch 16 each, 4 micro-batches), int8 with
// error feedback, H = 50 and the default outer step (0.7, 0.9), under DiLoCo and under
// streaming with 2 and 4 fragments (τ = 1, α = 0.5) and two ablations, and reports the peak bytes that one
// sync event sends (all workers together, the end-of-training sync of every fragment
// excepted: it is reported as final-B), the total, and the validation loss at the end.
// MESHNODE_STREAMING_STEPS sets the steps (default 300). docs/PERFORMANCE.md, "Streaming
// DiLoCo", has the command and the figures.
func BenchmarkStreamingSyncEvents(b *testing.B) {
	steps := 300
	if v, err := strconv.Atoi(os.Getenv("MESHNODE_STREAMING_STEPS")); err == nil && v > 0 {
		steps = v
	}
	data, err := model.LoadDataset(model.BuiltinGoStd, 256)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		mode   jobspec.Sync
		F, tau int
	}{{"diloco", jobspec.SyncDiLoCo, 1, 1}, {"streaming-F2", jobspec.SyncStreaming, 2, 1}, {"streaming-F4", jobspec.SyncStreaming, 4, 1},
		// Ablations: overlap and mixing without fragments, fragments without overlap.
		{"streaming-F1-overlap1", jobspec.SyncStreaming, 1, 1}, {"streaming-F2-overlap0", jobspec.SyncStreaming, 2, 0}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := JobConfig{Train: DefaultTrainConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
			cfg.Train.Steps, cfg.Train.MicroBatches, cfg.Train.EvalEvery = steps, 4, 0
			cfg.Sync.Mode, cfg.Sync.Fragments, cfg.Sync.InnerSteps, cfg.Sync.Codec = c.mode, c.F, 50, jobspec.CodecInt8
			cfg.Sync.Overlap = c.tau
			for b.Loop() {
				peak, final, total, val := streamingEvents(b, cfg, data)
				b.ReportMetric(float64(peak), "peak-B/event")
				b.ReportMetric(float64(final), "final-B")
				b.ReportMetric(float64(total), "sync-B")
				b.ReportMetric(val, "val-loss")
			}
		})
	}
}

// streamingEvents runs cfg on 2 replicas and returns the largest sync bytes sent after
// one step before the last, those after the last, the total and the final validation loss.
func streamingEvents(b *testing.B, cfg JobConfig, data *model.Dataset) (peak, final, total int64, val float64) {
	net := NewInMemory("r0", "r1")
	defer net.Close()
	run, err := NewLocalRun(cfg, EvenPlan(cfg.Train.Model.NumLayers(), []string{"r0"}, []string{"r1"}), data, net.Peer)
	if err != nil {
		b.Fatal(err)
	}
	for run.StepsDone() < cfg.Train.Steps {
		if _, err := run.Step(context.Background()); err != nil {
			b.Fatal(err)
		}
		_, sent := run.BytesSent()
		if run.StepsDone() == cfg.Train.Steps {
			final = sent - total
		} else {
			peak = max(peak, sent-total)
		}
		total = sent
	}
	if val, err = run.Evaluate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return peak, final, total, val
}
