package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestFixedStagesReachThePlan: parallel.stages is recorded in the plan inputs (so a replan
// keeps it) and the committed plan has that many stages; a job of stages: 2, replicas: 1
// used to run as one stage on the fastest node.
func TestFixedStagesReachThePlan(t *testing.T) {
	ms := members("a", "b", "c")
	spec := jobspec.DefaultSpec()
	spec.Parallel.Replicas, spec.Parallel.Stages = jobspec.AutoInt{N: 1}, jobspec.AutoInt{N: 2}
	plan, err := PlanJob(spec, ms, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Inputs.Stages != 2 {
		t.Fatalf("plan inputs record stages %d, want 2", plan.Inputs.Stages)
	}
	if len(plan.Replicas) != 1 || len(plan.Replicas[0]) != 2 {
		t.Fatalf("stages 2, replicas 1 planned %d replicas, first of %d stages", len(plan.Replicas), len(plan.Replicas[0]))
	}
	again, err := plan.Inputs.Replan()
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Replicas[0].Stages) != 2 {
		t.Fatalf("a replan from the recorded inputs gives %d stages", len(again.Replicas[0].Stages))
	}
}
