package parallel

import (
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/model"
)

// benchTrainStep measures training steps of a model shape on a synthetic byte corpus and
// reports tokens/s. Profile it with
//
//	go test -run '^$' -bench TrainStep/default -cpuprofile cpu.prof ./parallel
func benchTrainStep(b *testing.B, cfg model.Config) { benchTrainStepOf(b, cfg, false) }

// benchTrainStepOf is benchTrainStep with or without activation recomputation; it also
// reports the activation memory a step holds (the workspaces' peak).
func benchTrainStepOf(b *testing.B, cfg model.Config, recompute bool) {
	rng := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 1<<20)
	for i := range text {
		text[i] = byte(32 + rng.IntN(95))
	}
	data := &model.Dataset{Source: "bench", Train: model.ByteTokens(text[:1<<19]), Val: model.ByteTokens(text[1<<19:]), Vocab: 256}
	tc := DefaultTrainConfig()
	tc.Model = cfg
	tc.Steps, tc.Recompute = 1<<30, recompute
	tr, err := NewTrainer(tc, data)
	if err != nil {
		b.Fatal(err)
	}
	step(b, tr) // warm the workspace
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		step(b, tr)
	}
	tokens := float64(b.N * tc.Batch * cfg.Context)
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(tr.ActivationPeakBytes())/(1<<20), "act-MiB")
}

// BenchmarkRecompute compares a step of the default model (batch 16, one micro-batch)
// with and without activation recomputation:
//
//	go test -run '^$' -bench Recompute -count 5 ./parallel
func BenchmarkRecompute(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchTrainStepOf(b, model.DefaultConfig(), false) })
	b.Run("on", func(b *testing.B) { benchTrainStepOf(b, model.DefaultConfig(), true) })
}

func BenchmarkTrainStep(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchTrainStep(b, model.DefaultConfig()) })
	b.Run("6L-d256", func(b *testing.B) {
		c := model.DefaultConfig()
		c.Layers, c.DModel = 6, 256
		benchTrainStep(b, c)
	})
}
