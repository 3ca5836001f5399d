package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestTiedModelIsPlannedInOneStageWithoutOffload: a tied model's head shares the
// embedding's table, so the plan keeps them in one stage per replica (on a mesh where an
// untied model of the same shape is split) and never offloads it.
func TestTiedModelIsPlannedInOneStageWithoutOffload(t *testing.T) {
	ms := members("a", "b", "c")
	spec := jobspec.DefaultSpec()
	spec.Parallel.Replicas = jobspec.AutoInt{N: 1}
	spec.Memory.Offload = jobspec.OffloadAuto
	untied, err := PlanJob(spec, ms, Config{})
	if err != nil {
		t.Fatal(err)
	}
	spec.Model.Family = jobspec.FamilyGPT2
	tied, err := PlanJob(spec, ms, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tied.Inputs.Stages != 1 || tied.Inputs.Job.Offload != jobspec.OffloadOff {
		t.Fatalf("tied model planned with inputs stages %d, offload %q", tied.Inputs.Stages, tied.Inputs.Job.Offload)
	}
	for _, r := range tied.Replicas {
		if len(r) != 1 {
			t.Fatalf("tied model planned in %d stages (untied: %d)", len(r), len(untied.Replicas[0]))
		}
	}
	t.Logf("untied: %d stage(s) per replica; tied: 1", len(untied.Replicas[0]))
}
