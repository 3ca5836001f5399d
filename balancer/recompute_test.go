package balancer

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// defaultJob is the default model's job with micro-batches of one sequence.
func defaultJob(r jobspec.Recompute) Job {
	cfg := model.DefaultConfig()
	return Job{Layers: cfg.LayerCosts(), Batch: 16, Context: cfg.Context, MicroBatches: 16, Recompute: r}
}

func oneNode(mem float64) Snapshot {
	return Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 50, MemoryBytes: int64(mem)}}}
}

// stageNeed is what the one stage of a plan on one large node needs.
func stageNeed(t *testing.T, r jobspec.Recompute) (float64, Plan) {
	t.Helper()
	p, err := NewPlan(oneNode(1<<40), defaultJob(r), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Replicas[0].Stages[0].MemoryBytes, p
}

// TestOnlyRecomputeMakesJobFeasible: on a node with memory between what the default model
// needs with and without recomputation, the planner fails with recomputation off and, on
// auto, recomputes (priced: a slower predicted step) within the node's memory.
func TestOnlyRecomputeMakesJobFeasible(t *testing.T) {
	withR, onPlan := stageNeed(t, jobspec.RecomputeOn)
	without, offPlan := stageNeed(t, jobspec.RecomputeOff)
	if !(withR < without) || !onPlan.Replicas[0].Stages[0].Recompute {
		t.Fatalf("recomputation needs %.0f bytes, without %.0f (plan %+v)", withR, without, onPlan.Replicas[0].Stages[0])
	}
	if onPlan.Predicted.Compute <= offPlan.Predicted.Compute {
		t.Fatalf("recomputation predicted %.4g s of compute, without %.4g s: its extra forward passes are not priced", onPlan.Predicted.Compute, offPlan.Predicted.Compute)
	}
	snap := oneNode((withR + without) / 2)
	if _, err := NewPlan(snap, defaultJob(jobspec.RecomputeOff), Options{}); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("without recomputation: %v, want infeasible", err)
	}
	job := defaultJob(jobspec.RecomputeAuto)
	p, err := NewPlan(snap, job, Options{})
	if err != nil {
		t.Fatalf("auto: %v", err)
	}
	checkPlan(t, snap, job, p)
	if st := p.Replicas[0].Stages[0]; !st.Recompute {
		t.Fatalf("auto planned without recomputation: %+v", st)
	}
	sim, err := Simulate(snap, job, p)
	if err != nil || sim.Step < offPlan.Predicted.Step {
		t.Fatalf("the simulator times the recomputing plan at %v s (%v), less than without (%v s)", sim.Step, err, offPlan.Predicted.Step)
	}
	t.Logf("default model, 1-sequence micro-batches: %.1f MiB with recomputation, %.1f MiB without; %s", withR/(1<<20), without/(1<<20), p.Reason)
}

// TestPlannerDoesNotRecomputeWhenMemoryAllows: on random instances, auto recomputes only
// where no plan fits without it: where one does, auto's plan is exactly the plan with
// recomputation off; every plan fits the memory it claims.
func TestPlannerDoesNotRecomputeWhenMemoryAllows(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	rescued := 0
	for i := 0; i < 60; i++ {
		snap, job := randomInstance(rng, 5, 8, 12)
		off, errOff := NewPlan(snap, job, Options{})
		job.Recompute = jobspec.RecomputeAuto
		auto, errAuto := NewPlan(snap, job, Options{})
		switch {
		case errOff == nil:
			if errAuto != nil || !reflect.DeepEqual(off, auto) {
				t.Fatalf("instance %d: a plan fits without recomputation but auto planned %+v (%v)", i, auto, errAuto)
			}
		case errAuto == nil:
			rescued++
			checkPlan(t, snap, job, auto)
			recomputing := false
			for _, st := range auto.Replicas[0].Stages {
				recomputing = recomputing || st.Recompute
			}
			if !recomputing {
				t.Fatalf("instance %d: auto fits where off does not (%v) without recomputing", i, errOff)
			}
		}
	}
	t.Logf("%d of 60 instances feasible only with recomputation", rescued)
}
