package parallel

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// TestFamiliesTrainAcrossTheEngineAsOneProcess: Llama (grouped-query, untied) cut into
// 1–4 pipeline stages, and tied GPT-2 and Llama as replicas of one stage with ZeRO 2, train
// to the losses of one process (replicas: of one process with their combined batch), with
// every replica's weights equal. A tied model's plan of several stages is refused at the
// worker, naming the stage.
func TestFamiliesTrainAcrossTheEngineAsOneProcess(t *testing.T) {
	llama := model.Config{Family: jobspec.FamilyLlama, Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Intermediate: 48, Context: 24, Vocab: 256}
	cfg := pipelineConfig(6)
	cfg.Train.Model = llama
	want := singleProcessLosses(t, cfg.Train)
	for S := 1; S <= 4; S++ {
		got, _ := runLocal(t, cfg, EvenPlan(llama.NumLayers(), nodeNames("n", S)))
		for i := range want {
			if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-5 {
				t.Fatalf("llama, %d stages, step %d: loss %v, single process %v", S, i+1, got[i], want[i])
			}
		}
	}

	tiedLlama := llama
	tiedLlama.Tied = true
	gpt2 := model.Config{Family: jobspec.FamilyGPT2, Layers: 2, DModel: 32, Heads: 4, Context: 24, Vocab: 256}
	for _, m := range []model.Config{gpt2, tiedLlama} {
		cfg := pipelineConfig(6)
		cfg.Train.Model, cfg.Train.Batch, cfg.Train.MicroBatches = m, 4, 2
		cfg.Sync.Zero = 2
		whole := cfg.Train
		whole.Batch, whole.MicroBatches = 8, 4
		want := singleProcessLosses(t, whole)
		got, run := runLocal(t, cfg, EvenPlan(m.NumLayers(), []string{"a"}, []string{"b"}))
		for i := range want {
			if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-4 {
				t.Fatalf("%s tied, 2 replicas with ZeRO 2, step %d: loss %v, one process %v", m.FamilyName(), i+1, got[i], want[i])
			}
		}
		assertReplicasEqual(t, run)

		net := NewInMemory("s0", "s1")
		_, err := NewLocalRun(pipelineConfig(1).withModel(m), EvenPlan(m.NumLayers(), []string{"s0", "s1"}), testData(), net.Peer)
		net.Close()
		if err == nil {
			t.Fatalf("%s tied: a plan of two stages was accepted", m.FamilyName())
		}
		t.Logf("%s tied in two stages: %v", m.FamilyName(), err)
	}
}

func (c JobConfig) withModel(m model.Config) JobConfig {
	c.Train.Model = m
	return c
}
