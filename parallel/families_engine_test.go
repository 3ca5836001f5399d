package parallel

import (
	"context"
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// TestFamiliesTrainAcrossTheEngineAsOneProcess: Llama (grouped-query, untied) cut into
// 1–4 pipeline stages, and tied GPT-2 and Llama as replicas of one stage with ZeRO 2, train
// to the losses of one process (replicas: of one process with their combined batch), with
// every replica's weights equal. Tied models cut into stages train to one process's bits
// (model/tied.go, parallel/tied.go).
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

		// Cut into 2–4 stages (the embedding and the head apart), one replica: the same bits
		// as one process, the table and its gradient crossing between the end stages.
		one := pipelineConfig(6)
		one.Train.Model, one.Train.Batch, one.Train.MicroBatches = m, 4, 2
		wantOne := singleProcessLosses(t, one.Train)
		for S := 2; S <= 4; S++ {
			got, _ := runLocal(t, one, EvenPlan(m.NumLayers(), nodeNames("s", S)))
			for i := range wantOne {
				if math.Float64bits(got[i]) != math.Float64bits(wantOne[i]) {
					t.Fatalf("%s tied, %d stages, step %d: loss %v, one process %v", m.FamilyName(), S, i+1, got[i], wantOne[i])
				}
			}
		}
		// Evaluation after a step reads the updated table in the head's stage.
		tr, err := NewTrainer(one.Train, testData())
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		step(t, tr)
		wantEval, err := tr.Evaluate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		net := NewInMemory("e0", "e1", "e2")
		split, err := NewLocalRun(one, EvenPlan(m.NumLayers(), []string{"e0", "e1", "e2"}), testData(), net.Peer)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := split.Step(ctx); err != nil {
			t.Fatal(err)
		}
		gotEval, err := split.Evaluate(ctx)
		net.Close()
		if err != nil || math.Float64bits(gotEval) != math.Float64bits(wantEval) {
			t.Fatalf("%s tied, 3 stages: validation loss %v (%v), one process %v", m.FamilyName(), gotEval, err, wantEval)
		}
		// Two replicas of two stages, synchronised every step: one process's losses with the
		// combined batch, every replica's weights equal.
		two := cfg
		two.Sync.Zero = 0
		got, run = runLocal(t, two, EvenPlan(m.NumLayers(), []string{"a0", "a1"}, []string{"b0", "b1"}))
		for i := range want {
			if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-4 {
				t.Fatalf("%s tied, 2 replicas of 2 stages, step %d: loss %v, one process %v", m.FamilyName(), i+1, got[i], want[i])
			}
		}
		assertReplicasEqual(t, run)
	}
}
