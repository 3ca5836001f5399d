package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestTiedModelIsPlannedWithoutOffload: a tied model is never offloaded (the store pins
// the token table only with the embedding), and its stages may part the embedding from the
// head, the head's stage holding a copy of the table (model.LayerCost.TiedTableBytes).
func TestTiedModelIsPlannedWithoutOffload(t *testing.T) {
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
	if tied.Inputs.Job.Offload != jobspec.OffloadOff {
		t.Fatalf("tied model planned with offload %q", tied.Inputs.Job.Offload)
	}
	for _, r := range tied.Replicas {
		for _, st := range r {
			if st.MemoryBudget > 0 {
				t.Fatalf("tied model's stage on %s offloads (budget %d)", st.Node, st.MemoryBudget)
			}
		}
	}
	t.Logf("untied: %d stage(s) per replica; tied: %d", len(untied.Replicas[0]), len(tied.Replicas[0]))
}
