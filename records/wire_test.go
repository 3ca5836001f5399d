package records

import (
	"encoding/json"
	"flag"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ (after a deliberate, additive change)")

// The wire formats are pinned: each record, filled in every field, encodes exactly as its
// golden file, and the golden file decodes back to the same record. A renamed field, a
// changed tag or a removed one fails here before it changes what Raft logs, snapshots and
// API clients hold.

var at = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func f64(v float64) *float64 { return &v }

func sampleJob() Job {
	spec := jobspec.DefaultSpec()
	spec.Name, spec.Data.Blob, spec.Data.TrainShards, spec.Data.ShardTokens = "gostd-small", "b1a2", 3, 4096
	spec.Data.Tokenizer, spec.Data.TextField = "/data/tokenizer.json", "body"
	spec.Placement.MaxNodes, spec.Memory.Zero = 8, 1
	spec.Train.LoRA = &jobspec.LoRA{Rank: 8, Alpha: 16, Targets: []string{"q", "v"}}
	spec.Train.Precision = jobspec.PrecisionFP32
	spec.Parallel.Audit = jobspec.Pinned(0.5)                          // pinned on the wire though this sample (ZeRO, LoRA) would not run audited
	spec.Model, _ = jobspec.PresetModel("model.preset", "smollm-135m") // every model field set
	return Job{
		ID: "j-1", Name: "gostd-small", Spec: spec, Status: jobspec.JobRunning,
		SubmittedAt: at, SubmittedBy: "n9", UpdatedAt: at.Add(time.Minute),
		Plans: []PlanEpoch{{Epoch: 1, Plan: json.RawMessage(`{"replicas":[[{"node":"n1","first":0,"last":6}]]}`), Reason: "initial", SetAt: at}},
		Progress: []ProgressSample{{Time: at, Epoch: 1, Step: 100, Loss: 2.5, TokensPerSec: 16000, BytesSent: 1 << 20,
			ValLoss: f64(2.6), StepSeconds: 0.12}},
		StageTimes: []StageTimes{{Time: at, Epoch: 1, Step: 100, Node: "n1", Steps: 16, Compute: 0.09, Transfer: 0.01, Bubble: 0.015, Sync: 0.005}},
		Checkpoints: []CheckpointManifest{{Epoch: 1, Step: 100, Time: at, Files: []CheckpointFile{
			{Kind: "model", Node: "n1", Layers: [2]int{0, 5}, Hash: "h1", Bytes: 1234, Replica: 1}}}},
		Events:        []Event{{Time: at, Kind: jobspec.EventPlan, Epoch: 1, Step: 100, Message: "plan set initial", By: "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"}},
		Verdicts:      []Verdict{{Member: "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo", Accuser: "12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq", Convicted: true, Epoch: 1, Step: 90, Reason: "held-out score 0.02 below the floor", By: "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo", Time: at}},
		FinishedIndex: 42,
	}
}

func TestWireFormats(t *testing.T) {
	job := sampleJob()
	for name, v := range map[string]any{
		"job":         job,
		"job_summary": job.Summary(),
		"job_detail":  job.Detail(7),
		"profile":     sampleProfile(),
		"raft_status": RaftStatus{ID: "n1", State: "Leader", Leader: "n1", Term: 3, Voters: []string{"n1", "n2"},
			Nonvoters: []string{"n3"}, AppliedIndex: 10, CommitIndex: 11},
		"promotion_result": PromotionResult{ID: "n3", Decision: "approved", Suffrage: "nonvoter",
			Note: "promoted at the next free voter seat once it is alive and caught up"},
	} {
		t.Run(name, func(t *testing.T) {
			testutil.CheckWireFormat(t, name, v, *update, ".Data.Train", ".Data.Val", ".Data.Local")
		})
	}
}

// sampleProfile is a node's profile as it gossips it and the API serves it, every field set
// (GPU index 1: index 0 is a zero value the check would flag).
func sampleProfile() Profile {
	return Profile{GemmGFLOPS: 240, GemmShape: "2048x512x512", TrainGFLOPS: 110, TrainMicroGFLOPS: 82, TrainHostShare: 0.31, Slowdown: 2, Cores: 16,
		MemoryTotalBytes: 64 << 30, MemoryAvailableBytes: 60 << 30, MemoryBudgetBytes: 48 << 30, DiskFreeBytes: 1 << 40,
		DiskReadBps: 2e9, DiskWriteBps: 1e9,
		GPUs: []GPU{{Index: 1, Name: "NVIDIA H100", UUID: "GPU-1", MemoryTotalBytes: 80 << 30, MemoryFreeBytes: 79 << 30,
			Multiprocessors: 132, SMClockMHz: 1980, MemoryClockMHz: 2619, ComputeCapability: "9.0"}},
		OS: "linux", Arch: "amd64", Version: "v0.9", MeasuredAt: at,
		DataAddr: "10.0.0.2:4243", DataAddrs: []string{"10.0.0.2:4243", "127.0.0.1:4243"}, Region: "eu", Host: "3f2a9c0d51e7b684",
		Links:     []ProfileLink{{Peer: "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo", RTTSeconds: 0.02, BandwidthBps: 12.5e6}},
		LocalData: []string{"clinic-a", "web-2024"},
	}
}

// TestSampleProfileIsValid: the pinned profile passes the checks a receiving node applies.
func TestSampleProfileIsValid(t *testing.T) {
	p := sampleProfile()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}
