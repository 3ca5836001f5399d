package parallel

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// TestRestoreUnderAnotherPlanContinuesExactly: stage snapshots taken under a 2-stage plan,
// merged and restored into a 3-stage plan (resharding), continue with the losses of the
// uninterrupted run.
func TestRestoreUnderAnotherPlanContinuesExactly(t *testing.T) {
	cfg := pipelineConfig(8)
	L := cfg.Train.Model.NumLayers()
	full, _ := runLocal(t, cfg, EvenPlan(L, nodeNames("u", 2)))

	net := NewInMemory(nodeNames("a", 2)...)
	first, err := NewLocalRun(cfg, EvenPlan(L, nodeNames("a", 2)), testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	for first.StepsDone() < 3 {
		if _, err := first.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	weights := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
	moments := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
	for _, w := range first.Workers() {
		s := w.Snapshot()
		for k, v := range s.Model {
			weights.Tensors[k] = v
		}
		for k, v := range s.Optimizer {
			moments.Tensors[k] = v
		}
		moments.Metadata = s.OptimizerMeta
	}
	net.Close()

	net2 := NewInMemory(nodeNames("b", 3)...)
	defer net2.Close()
	second, err := NewLocalRun(cfg, EvenPlan(L, nodeNames("b", 3)), testData(), net2.Peer)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range second.Workers() {
		if err := w.Restore(weights, moments, 3); err != nil {
			t.Fatal(err)
		}
	}
	for i := 3; i < 8; i++ {
		got, err := second.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got != full[i] {
			t.Fatalf("step %d after restore under 3 stages: %v, uninterrupted %v", i+1, got, full[i])
		}
	}
	delete(moments.Tensors, "lm_head.weight.exp_avg")
	if err := second.Workers()[2].Restore(weights, moments, 3); err == nil {
		t.Fatal("restore with a missing moment succeeded")
	}
}
