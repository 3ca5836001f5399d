package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestPlanInputsCarryMemorySettings: the spec's memory section and the profiles' disk
// bandwidths reach the balancer; a spec stored before memory.offload plans without it.
func TestPlanInputsCarryMemorySettings(t *testing.T) {
	ms := members("a", "b")
	p := *ms[0].Profile
	p.DiskReadBps, p.DiskWriteBps = 2e9, 1e9
	ms[0].Profile = &p
	spec := jobspec.DefaultSpec()
	spec.Parallel.Sync, spec.Parallel.Codec = jobspec.SyncEveryStep, jobspec.CodecNone
	spec.Memory = jobspec.Memory{Recompute: jobspec.RecomputeOn, Zero: 2, Offload: jobspec.OffloadOn}
	in, err := planInputs(spec, candidates(ms), nil)
	if err != nil {
		t.Fatal(err)
	}
	if in.Job.Zero != 2 || in.Job.Offload != jobspec.OffloadOn || in.Job.Recompute != jobspec.RecomputeOn {
		t.Fatalf("job %+v does not carry memory %+v", in.Job, spec.Memory)
	}
	found := false
	for _, n := range in.Snapshot.Nodes {
		if n.ID == "a" {
			found = n.DiskReadBps == 2e9 && n.DiskWriteBps == 1e9
		}
	}
	if !found {
		t.Fatalf("node a's disk bandwidths are not in %+v", in.Snapshot.Nodes)
	}
	spec.Memory.Offload = ""
	if in, _ = planInputs(spec, candidates(ms), nil); in.Job.Offload != jobspec.OffloadOff {
		t.Fatalf("a spec without memory.offload plans with %q", in.Job.Offload)
	}
}
