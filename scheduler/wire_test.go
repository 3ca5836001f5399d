package scheduler

import (
	"flag"
	"testing"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/model"
)

var diskFree uint64 = 20 << 30

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ (after a deliberate, additive change)")

// TestJobPlanWireFormat pins the plan the leader commits through Raft (a plan epoch's
// opaque JSON) and the API serves: its stages are the engine's parallel.StagePlan and its
// inputs the balancer's snapshot and job, so a renamed JSON tag in either package would
// change the replicated state; this golden file fails first.
func TestJobPlanWireFormat(t *testing.T) {
	cost := model.LayerCost{Name: "block.0", ForwardFLOPsPerToken: 1e6, BackwardFLOPsPerToken: 2e6, ParamBytes: 1 << 20,
		GradBytes: 1 << 20, OptimizerBytes: 2 << 20, OutputBytesPerToken: 512, SavedBytesPerToken: 4096, TiedTableBytes: 1 << 18}
	plan := JobPlan{
		// Not a plan the balancer would make (a stage of layers [2,6) alone): every field is set.
		Replicas:     [][]Stage{{{Node: "n2", First: 2, Last: 6, Recompute: true, MemoryBudget: 4 << 20}}},
		Batches:      []int{16},
		MicroBatches: 4, Strategy: jobspec.StrategyAuto, PredictedStepS: 0.12, Reason: "bound by compute", ResumeStep: 100, Continues: true,
		PredictedGFLOPS: map[string]float64{"n2": 33.5},
		DataShards:      [][]int{{0, 2}},
		Built:           3, Slots: []int{1}, Rejoin: []string{"n2"}, Audited: true,
		Dropped: []DroppedReplica{{Slot: 2, Stages: []Stage{{Node: "n1", First: 2, Last: 6, Recompute: true, MemoryBudget: 4 << 20}}, Batch: 16, Shards: []int{1}}},
		Inputs: PlanInputs{
			Snapshot: balancer.Snapshot{
				Nodes: []balancer.Node{{ID: "n1", GFLOPS: 40, MemoryBytes: 20 << 20, Host: "3f2a9c0d51e7b684", HostShare: 0.5, HostLoad: 1.5, MicroEfficiency: 0.75, GPU: &balancer.GPU{Name: "H100", GFLOPS: 5e5, MemoryBytes: 80 << 30},
					DiskReadBps: 2e9, DiskWriteBps: 1e9, DiskFreeBytes: &diskFree}},
				Links: []balancer.Link{{From: "n1", To: "n2", RTT: 0.02, Bandwidth: 12.5e6}},
			},
			Job: balancer.Job{Layers: []model.LayerCost{cost}, Batch: 16, Context: 128, MicroBatches: 4, Schedule: jobspec.Schedule1F1B,
				Sync:      balancer.Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 50, Compression: 4, Fragments: 2, Audit: 1.5, AuditAuto: true},
				Recompute: jobspec.RecomputeAuto, Zero: 1, Offload: jobspec.OffloadAuto},
			Strategy: jobspec.StrategyAuto, MaxReplicas: 2, Stages: 2,
		},
	}
	testutil.CheckWireFormat(t, "job_plan", plan, *update)
}
