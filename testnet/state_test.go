package testnet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/scheduler"
)

func TestStateRoundTripAndContract(t *testing.T) {
	dir := t.TempDir()
	st := State{Dir: dir, Supervisor: 42, Control: "127.0.0.1:1",
		Nodes: []NodeState{{Name: "node0", ID: "12D3KooWx", API: "127.0.0.1:2", PID: 7, Region: "eu", Slowdown: 2, Alive: true}}}
	if err := st.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(dir)
	if err != nil || got.Nodes[0] != st.Nodes[0] || got.Supervisor != 42 {
		t.Fatalf("LoadState = %+v, %v", got, err)
	}
	// The documented contract: {"dir":..,"nodes":[{"name","id","api","pid","region","slowdown"}]}.
	var raw map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, StateFile))
	json.Unmarshal(b, &raw)
	n := raw["nodes"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "id", "api", "pid", "region", "slowdown"} {
		if _, ok := n[k]; !ok {
			t.Errorf("testnet.json node lacks %q: %s", k, b)
		}
	}
	if raw["dir"] != dir {
		t.Errorf("testnet.json dir = %v", raw["dir"])
	}
	if _, err := LoadState(t.TempDir()); err == nil || !strings.Contains(err.Error(), "testnet up") {
		t.Errorf("LoadState of an empty dir: %v", err)
	}
	// A PID that is not ours (this test's own, whose command line does not name the
	// node's data directory) is never taken for a running node.
	st.Nodes[0].PID, st.Nodes[0].DataDir = os.Getpid(), filepath.Join(dir, "node0")
	if Refresh(st).Nodes[0].Alive {
		t.Error("Refresh took an unrelated process for the node")
	}
}

func TestSummarize(t *testing.T) {
	v0, v1 := 5.55, 3.1
	t0 := time.Unix(1000, 0)
	plan, _ := json.Marshal(scheduler.JobPlan{Strategy: "sky", PredictedStepS: 0.5,
		Replicas: [][]scheduler.Stage{{{Node: "A", First: 0, Last: 4}, {Node: "B", First: 4, Last: 6}}}})
	job := consensus.JobDetail{ID: "j1", Status: consensus.JobDone,
		Plan: &consensus.PlanEpoch{Epoch: 1, Plan: plan},
		Progress: consensus.ProgressView{Step: 100, Samples: []consensus.ProgressSample{
			{Time: t0, Epoch: 1, Step: 0, ValLoss: &v0},
			{Time: t0.Add(20 * time.Second), Epoch: 1, Step: 50, TokensPerSec: 1000, BytesSent: 5000},
			{Time: t0.Add(40 * time.Second), Epoch: 1, Step: 100, TokensPerSec: 3000, BytesSent: 10000, ValLoss: &v1},
		}}}
	nodes := []NodeState{{Name: "a", ID: "A", Region: "eu", Slowdown: 1}, {Name: "b", ID: "B", Region: "us", Slowdown: 3}}
	peers := map[string]api.Peer{"A": {Profile: &mesh.Profile{GemmGFLOPS: 60}}, "B": {Profile: &mesh.Profile{GemmGFLOPS: 20}}}
	s := Summarize(job, nodes, peers)
	if s.Event != "summary" || s.Status != "done" || s.Strategy != "sky" || s.PredictedStepTimeS != 0.5 {
		t.Errorf("summary header %+v", s)
	}
	if s.StepTimeS != 0.4 || s.TokensPerSec != 2000 || s.BytesPerStep != 100 {
		t.Errorf("step %v s, %v tok/s, %v B/step; want 0.4, 2000, 100", s.StepTimeS, s.TokensPerSec, s.BytesPerStep)
	}
	if *s.InitialValLoss != v0 || *s.FinalValLoss != v1 {
		t.Errorf("val losses %v → %v", *s.InitialValLoss, *s.FinalValLoss)
	}
	if a, b := s.Nodes[0], s.Nodes[1]; a.GemmGFLOPS != 60 || len(a.Layers) != 1 || a.Layers[0] != [2]int{0, 4} ||
		b.Layers[0] != [2]int{4, 6} || b.Slowdown != 3 {
		t.Errorf("nodes %+v", s.Nodes)
	}
	if got := LayerMap(s.Nodes[0].Layers); got != "0–3" {
		t.Errorf("LayerMap = %q", got)
	}
}

// The summary says whether a node could have held the model alone, from the plan's layer
// costs and the nodes' budgets, and keeps the reason of the epoch that set the layout.
func TestSummarizeSaysWhyTheModelWasSplit(t *testing.T) {
	layers := []model.LayerCost{{ParamBytes: 4 << 20, GradBytes: 4 << 20, OptimizerBytes: 8 << 20}}
	jp := scheduler.JobPlan{Reason: "recalibrated: epoch 1 measured 0.3 s/step",
		Replicas: [][]scheduler.Stage{{{Node: "A", First: 0, Last: 1}}, {{Node: "B", First: 0, Last: 1}}},
		Inputs:   scheduler.PlanInputs{Job: balancer.Job{Layers: layers}}}
	plan, _ := json.Marshal(jp)
	job := consensus.JobDetail{ID: "j1", Plan: &consensus.PlanEpoch{Epoch: 2, Plan: plan}, Events: []consensus.Event{
		{Kind: jobspec.EventPlan, Message: "plan set 2 replica(s), 1 stages; bound by compute on A"},
		{Kind: jobspec.EventPlan, Message: "plan set recalibrated: epoch 1 measured 0.3 s/step"}}}
	nodes := []NodeState{{Name: "a", ID: "A"}, {Name: "b", ID: "B"}, {Name: "c", ID: "C"}}
	budgets := func(a, b, c uint64) map[string]api.Peer {
		return map[string]api.Peer{"A": {Profile: &mesh.Profile{MemoryBudgetBytes: a}},
			"B": {Profile: &mesh.Profile{MemoryBudgetBytes: b}}, "C": {Profile: &mesh.Profile{MemoryBudgetBytes: c}}}
	}
	s := Summarize(job, nodes, budgets(12<<20, 12<<20, 14<<20))
	if s.ModelStateBytes != 16<<20 || s.Nodes[0].Replica != 1 || s.Nodes[1].Replica != 2 || s.Nodes[2].Replica != 0 {
		t.Errorf("model state %d B, replicas %d %d %d; want 16 MiB, 1 2 0", s.ModelStateBytes, s.Nodes[0].Replica, s.Nodes[1].Replica, s.Nodes[2].Replica)
	}
	if want := "no node could hold the model alone: its weights, gradients and AdamW moments need 16.0 MiB, and the largest budget, c's, is 14.0 MiB; 2 nodes hold layers in 2 replica(s)"; s.Split != want {
		t.Errorf("split %q\nwant  %q", s.Split, want)
	}
	if s.Reason != "2 replica(s), 1 stages; bound by compute on A" {
		t.Errorf("reason %q: want the layout's plan event", s.Reason)
	}
	if s = Summarize(job, nodes, budgets(12<<20, 64<<20, 14<<20)); !strings.HasPrefix(s.Split, "b could hold the model alone (16.0 MiB of its 64.0 MiB)") {
		t.Errorf("split %q: want b named as able to hold it", s.Split)
	}
}
