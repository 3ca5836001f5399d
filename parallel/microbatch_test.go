package parallel

import (
	"context"
	"math"
	"testing"

	"github.com/meshnode/meshnode/model"
)

// stepGrads runs one step of cfg on plan and returns every parameter's gradient by name
// (what the step summed over its micro-batches, before clipping and AdamW used it).
func stepGrads(t *testing.T, cfg JobConfig, plan Plan) map[string][]float32 {
	t.Helper()
	net := NewInMemory(planNodes(plan)...)
	defer net.Close()
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, w := range run.Workers() {
		for _, p := range model.LayerParams(w.Layers()) {
			out[p.Name] = append([]float32(nil), p.Grad.Data...)
		}
	}
	return out
}

// TestMicroBatchCountDoesNotChangeTheMath: the planner may pick any micro-batch count up
// to the batch, including counts that split it unequally (3 and 5 of 8 sequences). Every
// count gives a pipeline the same summed gradient per step and the same losses, within
// float32 reduction-order tolerance, as one micro-batch of the whole batch.
func TestMicroBatchCountDoesNotChangeTheMath(t *testing.T) {
	const steps = 6
	cfg := pipelineConfig(steps)
	cfg.Train.ClipNorm = 0 // the gradients compared are the raw sums
	plan := EvenPlan(cfg.Train.Model.NumLayers(), nodeNames("m", 3))
	cfg.Train.MicroBatches = 1
	wantGrads := stepGrads(t, cfg, plan)
	wantLoss, _ := runLocal(t, cfg, plan)
	for _, M := range []int{2, 3, 5, 8} {
		cfg.Train.MicroBatches = M
		for name, got := range stepGrads(t, cfg, plan) {
			want := wantGrads[name]
			scale := 0.0
			for _, g := range want {
				scale = math.Max(scale, math.Abs(float64(g)))
			}
			for i := range want {
				if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(scale+1e-3) {
					t.Fatalf("M=%d: %s[%d] gradient %g, one micro-batch %g", M, name, i, got[i], want[i])
				}
			}
		}
		got, _ := runLocal(t, cfg, plan)
		for i := range wantLoss {
			if rel := math.Abs(got[i]-wantLoss[i]) / wantLoss[i]; rel > 1e-5 {
				t.Fatalf("M=%d, step %d: loss %v, one micro-batch %v", M, i+1, got[i], wantLoss[i])
			}
		}
	}
}
