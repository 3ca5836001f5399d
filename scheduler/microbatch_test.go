package scheduler

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// smallMembers are live nodes with the testnet's default budget of 20 MiB, too small to
// train the default job's model alone, linked to each other.
func smallMembers(ids ...string) []Member {
	out := members(ids...)
	for i := range out {
		p := *out[i].Profile
		p.MemoryBytes = 20 << 20
		out[i].Profile = &p
	}
	return out
}

// TestLossReplansWithSmallerMicroBatches is issue 15's scenario at the scheduler: the
// default job on three 20 MiB nodes loses one. With micro-batches pinned at 4 (the old
// default) and no recomputation, no partition of the model over the two survivors fits
// memory and the job fails (offload off too); with micro-batches on "auto" (the default now), the replan
// trades micro-batch size for memory and the job goes on on the two survivors without
// recomputing; pinned at 4 with recomputation on "auto" (the default), it recomputes.
func TestLossReplansWithSmallerMicroBatches(t *testing.T) {
	abc := smallMembers("a", "b", "c")
	pinned := jobspec.DefaultSpec()
	pinned.Train.MicroBatches, pinned.Memory.Recompute = jobspec.Fixed(4), jobspec.RecomputeOff
	pinned.Memory.Offload = jobspec.OffloadOff
	pinnedRecompute := pinned
	pinnedRecompute.Memory.Recompute = jobspec.RecomputeAuto
	auto := jobspec.DefaultSpec()
	for _, tc := range []struct {
		name string
		spec jobspec.Spec
		kind DecisionKind
	}{{"pinned at 4", pinned, DecisionFail}, {"auto", auto, DecisionReplan}, {"pinned at 4, recompute", pinnedRecompute, DecisionReplan}} {
		t.Run(tc.name, func(t *testing.T) {
			j := running(t, tc.spec, abc)
			if len(j.Plan.Nodes()) != 3 {
				t.Fatalf("the plan on three 20 MiB nodes uses %v", j.Plan.Nodes())
			}
			victim := j.Plan.Nodes()[1]
			h := &Harness{SelfID: "a", MemberList: with(abc, victim, MemberDead), JobList: []Job{j}, Clock: t0}
			d := decision(t, h, New(Config{}))
			if d.Kind != tc.kind {
				t.Fatalf("decision %s %q, want %s", d.Kind, d.Reason, tc.kind)
			}
			if d.Kind == DecisionFail {
				if !strings.Contains(d.Reason, "no feasible plan after a failure") {
					t.Fatalf("fails for another reason: %s", d.Reason)
				}
				return
			}
			if d.Plan.Has(victim) || len(d.Plan.Nodes()) != 2 {
				t.Fatalf("replan on %v after losing %s", d.Plan.Nodes(), victim)
			}
			recomputing := false
			for _, st := range d.Plan.Replicas[0] {
				recomputing = recomputing || st.Recompute
			}
			if pinnedAt4 := !tc.spec.Train.MicroBatches.IsAuto; recomputing != pinnedAt4 {
				t.Fatalf("replan recomputes: %v (stages %+v)", recomputing, d.Plan.Replicas[0])
			}
			if per := float64(auto.Train.Batch) / float64(d.Plan.MicroBatches); tc.spec.Train.MicroBatches.IsAuto && per >= 4 {
				t.Fatalf("replan keeps micro-batches of %g sequences (%d of them)", per, d.Plan.MicroBatches)
			}
			t.Logf("replanned on %v with %d micro-batches (was %d)", d.Plan.Nodes(), d.Plan.MicroBatches, j.Plan.MicroBatches)
		})
	}
}
