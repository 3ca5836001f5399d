package balancer

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

func smallJob() Job {
	cfg := model.Config{Layers: 4, DModel: 64, Heads: 4, Context: 32, Vocab: 256}
	return Job{Layers: cfg.LayerCosts(), Batch: 4, Context: cfg.Context}
}

// Acceptance 6: infeasible inputs fail with an error naming the constraint and the shortfall.
func TestInfeasibleInputs(t *testing.T) {
	job := smallJob()
	static := 0.0
	for _, c := range job.Layers {
		static += float64(c.StaticBytes())
	}
	node := func(id string, gflops float64, mem int64) Node { return Node{ID: id, GFLOPS: gflops, MemoryBytes: mem} }
	cases := []struct {
		name       string
		nodes      []Node
		constraint string
		words      []string
	}{
		{"no nodes", nil, "nodes", []string{"no nodes"}},
		{"zero speed", []Node{node("a", 10, 1<<30), node("b", 0, 1<<30)}, "speed", []string{`"b"`, "0 GFLOP/s", "> 0"}},
		{"model bigger than all memory", []Node{node("a", 10, int64(static/4)), node("b", 10, int64(static/4))},
			"memory", []string{"need", "all 2 nodes together have", "short by"}},
		{"one layer bigger than any node", []Node{node("a", 10, int64(static/5)), node("b", 10, int64(static/5)),
			node("c", 10, int64(static/5)), node("d", 10, int64(static/5)), node("e", 10, int64(static/5)), node("f", 10, int64(static/5))},
			"layer-memory", []string{"layer", "largest node", "short by"}},
	}
	for _, tc := range cases {
		for _, s := range []jobspec.Strategy{jobspec.StrategyEven, jobspec.StrategySky, jobspec.StrategyAuto, jobspec.StrategyOptimal} {
			_, err := NewPlan(Snapshot{Nodes: tc.nodes}, job, Options{Strategy: s})
			var ie *InfeasibleError
			if !errors.Is(err, ErrInfeasible) || !errors.As(err, &ie) || ie.Constraint != tc.constraint {
				t.Fatalf("%s / %s: got %v, want a %q infeasible error", tc.name, s, err, tc.constraint)
			}
			if tc.constraint != "nodes" && !(ie.Need > ie.Have) {
				t.Errorf("%s: need %g should exceed have %g", tc.name, ie.Need, ie.Have)
			}
			for _, w := range tc.words {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s / %s: %q does not say %q", tc.name, s, err, w)
				}
			}
		}
	}
}

// Activations that cannot fit any partition are reported as such, with the sizes.
func TestInfeasibleActivations(t *testing.T) {
	job := smallJob()
	job.Batch, job.Context = 64, 32
	need := 0.0
	for _, c := range job.Layers {
		need += float64(c.StaticBytes())
	}
	snap := Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 10, MemoryBytes: int64(need * 0.7)}, {ID: "b", GFLOPS: 10, MemoryBytes: int64(need * 0.7)}}}
	job.Context = 4096 // activations dwarf parameters
	for _, s := range []jobspec.Strategy{jobspec.StrategySky, jobspec.StrategyAuto} {
		_, err := NewPlan(snap, job, Options{Strategy: s})
		var ie *InfeasibleError
		if !errors.As(err, &ie) || (ie.Constraint != "activation-memory" && ie.Constraint != "layer-memory") {
			t.Fatalf("%s: got %v, want an activation or layer memory error", s, err)
		}
	}
}

// Malformed jobs are rejected field by field.
func TestJobValidate(t *testing.T) {
	bad := Job{Batch: 0, Context: 0, MicroBatches: -1, Schedule: "zigzag", Sync: Sync{Mode: "gossip", Compression: 0.5}}
	err := bad.Validate()
	for _, w := range []string{"layers", "batch", "context", "micro_batches", "schedule", "sync.mode", "sync.compression"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate() = %v, want it to name %s", err, w)
		}
	}
	if err := smallJob().Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewPlan(Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 1, MemoryBytes: 1 << 30}}}, smallJob(), Options{Strategy: "magic"}); err == nil {
		t.Fatal("unknown strategy accepted")
	}
}
