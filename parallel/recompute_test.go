package parallel

import (
	"testing"

	"github.com/meshnode/meshnode/model"
)

// TestRecomputeTrainsBitIdentically: 20 steps of one process with activation
// recomputation give bit for bit the losses and weights of 20 steps without, and hold less
// activation memory.
func TestRecomputeTrainsBitIdentically(t *testing.T) {
	cfg := testConfig()
	cfg.Steps = 20
	plain, re := cfg, cfg
	re.Recompute = true
	trainers := map[bool]*Trainer{}
	losses := map[bool][]float64{}
	for _, c := range []TrainConfig{plain, re} {
		tr, err := NewTrainer(c, testData())
		if err != nil {
			t.Fatal(err)
		}
		for tr.StepsDone() < c.Steps {
			losses[c.Recompute] = append(losses[c.Recompute], step(t, tr))
		}
		trainers[c.Recompute] = tr
	}
	for i, want := range losses[false] {
		if got := losses[true][i]; got != want {
			t.Fatalf("step %d: loss %v with recomputation, %v without", i+1, got, want)
		}
	}
	assertSameWeights(t, trainers[false].Model().Params(), trainers[true].Model().Params())
	off, on := trainers[false].ActivationPeakBytes(), trainers[true].ActivationPeakBytes()
	if on >= off {
		t.Fatalf("activation memory %d bytes with recomputation, %d without", on, off)
	}
}

// TestRecomputeIsPerStage: a pipeline whose middle stage alone recomputes trains bit for
// bit like the same pipeline without recomputation, over 20 steps.
func TestRecomputeIsPerStage(t *testing.T) {
	cfg := pipelineConfig(20)
	plan := EvenPlan(cfg.Train.Model.NumLayers(), nodeNames("r", 3))
	want, base := runLocal(t, cfg, plan)
	plan.Replicas[0][1].Recompute = true
	got, run := runLocal(t, cfg, plan)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: loss %v with the middle stage recomputing, %v without", i+1, got[i], want[i])
		}
	}
	for s, w := range run.Workers() {
		_, recomputed := w.Layers()[0].(*model.Recomputed)
		if recomputed != (s == 1) {
			t.Fatalf("stage %d recomputes: %v", s, recomputed)
		}
		assertSameWeights(t, model.LayerParams(base.Workers()[s].Layers()), model.LayerParams(w.Layers()))
	}
}

func assertSameWeights(t *testing.T, a, b []*model.Param) {
	t.Helper()
	for i := range a {
		for k, v := range a[i].Value.Data {
			if b[i].Value.Data[k] != v {
				t.Fatalf("%s[%d]: %v and %v", a[i].Name, k, v, b[i].Value.Data[k])
			}
		}
	}
}
