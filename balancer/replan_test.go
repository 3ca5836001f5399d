package balancer

import (
	"math"
	"strings"
	"testing"
)

func TestReplan(t *testing.T) {
	sc := Geo3(1)
	cur, err := NewPlan(sc.Snapshot, sc.Job, Options{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("unchanged snapshot keeps the plan", func(t *testing.T) {
		dec, err := Replan(cur, sc.Snapshot, sc.Job, Options{})
		if err != nil || dec.Replan {
			t.Fatalf("replan on an unchanged snapshot: %+v, %v", dec.Reason, err)
		}
	})

	t.Run("small slowdown stays within the margin", func(t *testing.T) {
		snap := cloneSnapshot(sc.Snapshot)
		snap.Nodes[0].GFLOPS *= 0.95
		dec, err := Replan(cur, snap, sc.Job, Options{})
		if err != nil || dec.Replan {
			t.Fatalf("5%% slowdown replanned: %s, %v", dec.Reason, err)
		}
	})

	t.Run("a dead node forces a new plan", func(t *testing.T) {
		snap := cloneSnapshot(sc.Snapshot)
		dead := cur.Replicas[0].Stages[0].Node
		snap.Nodes = removeNode(snap.Nodes, dead)
		dec, err := Replan(cur, snap, sc.Job, Options{})
		if err != nil || !dec.Replan || !math.IsInf(dec.CurrentStep, 1) || !strings.Contains(dec.Reason, dead) {
			t.Fatalf("dead node: %+v, %v", dec, err)
		}
		checkPlan(t, snap, sc.Job, dec.Plan)
		if dec.MoveBytes <= 0 {
			t.Errorf("the dead node's layers must move, got %g bytes", dec.MoveBytes)
		}
	})

	t.Run("a much faster mesh replans unless moving costs too much", func(t *testing.T) {
		snap := cloneSnapshot(sc.Snapshot)
		for i := range snap.Nodes {
			if i%4 == 3 {
				snap.Nodes[i].GFLOPS *= 20 // one node per region becomes far faster
			}
		}
		dec, err := Replan(cur, snap, sc.Job, Options{})
		if err != nil || !dec.Replan || dec.NewStep >= dec.CurrentStep*0.9 {
			t.Fatalf("faster nodes: %+v, %v", dec.Reason, err)
		}
		// Moving the layers must pay for itself within the horizon: over one step it cannot.
		dec, err = Replan(cur, snap, sc.Job, Options{MoveHorizonSteps: 1, Margin: 0.01})
		if err != nil || dec.MoveSeconds <= dec.CurrentStep || dec.Replan {
			t.Fatalf("moving %g bytes in %g s should outweigh one step of %g s: %s, %v",
				dec.MoveBytes, dec.MoveSeconds, dec.CurrentStep, dec.Reason, err)
		}
	})
}

func cloneSnapshot(s Snapshot) Snapshot {
	return Snapshot{Nodes: append([]Node(nil), s.Nodes...), Links: append([]Link(nil), s.Links...)}
}

func removeNode(nodes []Node, id string) []Node {
	var out []Node
	for _, n := range nodes {
		if n.ID != id {
			out = append(out, n)
		}
	}
	return out
}
