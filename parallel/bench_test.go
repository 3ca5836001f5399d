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
func benchTrainStep(b *testing.B, cfg model.Config) {
	rng := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 1<<20)
	for i := range text {
		text[i] = byte(32 + rng.IntN(95))
	}
	data := &model.Dataset{Source: "bench", Train: model.ByteTokens(text[:1<<19]), Val: model.ByteTokens(text[1<<19:]), Vocab: 256}
	tc := DefaultTrainConfig()
	tc.Model = cfg
	tc.Steps = 1 << 30
	tr, err := NewTrainer(tc, data)
	if err != nil {
		b.Fatal(err)
	}
	tr.Step() // warm the workspace
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr.Step()
	}
	tokens := float64(b.N * tc.Batch * cfg.Context)
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
}

func BenchmarkTrainStep(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchTrainStep(b, model.DefaultConfig()) })
	b.Run("6L-d256", func(b *testing.B) {
		c := model.DefaultConfig()
		c.Layers, c.DModel = 6, 256
		benchTrainStep(b, c)
	})
}
