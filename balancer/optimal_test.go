package balancer

import (
	"errors"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Acceptance 2: on 100 random small instances (≤ 6 nodes, ≤ 16 layers, one replica) auto
// simulates within 3% of optimal on at least 95 and never worse than 10%.
func TestAutoNearOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	var ratios []float64
	within3, tried := 0, 0
	for len(ratios) < 100 {
		tried++
		if tried > 400 {
			t.Fatalf("only %d feasible instances in %d draws", len(ratios), tried)
		}
		snap, job := randomInstance(rng, OptimalMaxNodes, OptimalMaxLayers-2, 8)
		opt, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyOptimal})
		if errors.Is(err, ErrInfeasible) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		auto, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: 1})
		if err != nil {
			t.Fatalf("instance %d: auto failed where optimal succeeds: %v", len(ratios), err)
		}
		checkPlan(t, snap, job, opt)
		checkPlan(t, snap, job, auto)
		r := simulated(t, snap, job, auto) / simulated(t, snap, job, opt)
		if r <= 1.03 {
			within3++
		}
		if r > 1.10 {
			t.Errorf("instance %d (%d nodes, %d layers): auto %.3f× optimal", len(ratios), len(snap.Nodes), len(job.Layers), r)
		}
		ratios = append(ratios, r)
	}
	sort.Float64s(ratios)
	t.Logf("auto/optimal over 100 instances: within 3%% on %d, median %.4f, worst %.4f, best %.4f",
		within3, ratios[50], ratios[99], ratios[0])
	if within3 < 95 {
		t.Errorf("auto within 3%% of optimal on %d of 100 instances, want ≥ 95", within3)
	}
}

// optimal refuses instances it cannot search exhaustively, saying why.
func TestOptimalRefusesLargeInstances(t *testing.T) {
	sc := Geo3(1)
	_, err := NewPlan(sc.Snapshot, sc.Job, Options{Strategy: jobspec.StrategyOptimal})
	var ie *InfeasibleError
	if !errors.As(err, &ie) || ie.Constraint != "optimal-size" {
		t.Fatalf("got %v, want an optimal-size error", err)
	}
}
