package scheduler

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	chunks "github.com/meshnode/meshnode/parallel/offload"
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

// TestLossReplansWithOffload: the default job on three 8 MiB nodes loses two. The survivor
// cannot hold the model's training state (13.4 MiB) even recomputing: with memory.offload
// off the job fails; on auto (the default) the replan after the failure, the same search,
// offloads what does not fit, and the committed inputs re-derive the stage's offload.
func TestLossReplansWithOffload(t *testing.T) {
	abc := smallMembers("a", "b", "c")
	for i := range abc {
		p := *abc[i].Profile
		p.MemoryBytes = 8 << 20
		abc[i].Profile = &p
	}
	off := jobspec.DefaultSpec()
	off.Memory.Offload = jobspec.OffloadOff
	for _, tc := range []struct {
		name string
		spec jobspec.Spec
		kind DecisionKind
	}{{"offload off", off, DecisionFail}, {"offload auto", jobspec.DefaultSpec(), DecisionReplan}} {
		t.Run(tc.name, func(t *testing.T) {
			j := running(t, tc.spec, abc)
			nodes := j.Plan.Nodes()
			if len(nodes) < 2 {
				t.Fatalf("the plan on three 8 MiB nodes uses %v", nodes)
			}
			survivor := nodes[0]
			ms := abc
			for _, m := range abc {
				if m.ID != survivor {
					ms = with(ms, m.ID, MemberDead)
				}
			}
			h := &Harness{SelfID: survivor, MemberList: ms, JobList: []Job{j}, Clock: t0}
			d := decision(t, h, New(Config{}))
			if d.Kind != tc.kind {
				t.Fatalf("decision %s %q, want %s", d.Kind, d.Reason, tc.kind)
			}
			if d.Kind == DecisionFail {
				return
			}
			bp, err := d.Plan.Inputs.Replan()
			if err != nil {
				t.Fatal(err)
			}
			if st := bp.Replicas[0].Stages; len(st) != 1 || st[0].Node != survivor || st[0].OffloadBytes <= 0 || st[0].MemoryBudget <= 0 {
				t.Fatalf("replan stages %+v (reason %q), want the survivor offloading", st, d.Plan.Reason)
			}
			// The committed plan carries the stage's resident budget to its worker.
			cs := d.Plan.Replicas[0]
			if len(cs) != 1 || cs[0].MemoryBudget != bp.Replicas[0].Stages[0].MemoryBudget {
				t.Fatalf("committed stages %+v, want memory_budget %d", cs, bp.Replicas[0].Stages[0].MemoryBudget)
			}
			// The engine's store accepts the budget: it holds a layer's weights and gradients.
			var sizes [][]int
			for _, l := range model.NewLayerShells(ModelConfig(tc.spec), cs[0].First, cs[0].Last) {
				var n []int
				for _, p := range l.Params() {
					n = append(n, kernels.ShapeSize(p.Value.Shape))
				}
				sizes = append(sizes, n)
			}
			if _, err := chunks.Choose(sizes, cs[0].MemoryBudget, 0); err != nil {
				t.Fatalf("the worker's store refuses the planned budget: %v", err)
			}
			t.Logf("replanned on %s: %s", survivor, d.Plan.Reason)
		})
	}
}
