package balancer

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// A fixed stage count is a count, not a cap: with replicas: 1 on the testnet-like mesh,
// stages: n gives one pipeline of exactly n stages, whatever auto would choose alone (a
// job of stages: 2, replicas: 1 used to run as one stage), as a user reading
// parallel.stages expects. More stages than nodes can hold gives the
// most that fit, and the plan's reason says so.
func TestFixedStageCountIsExact(t *testing.T) {
	snap, job := testnetLike(100, 20e-3, jobspec.SyncDiLoCo)
	for _, n := range []int{1, 2, 3, 4} {
		p, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: 1, Stages: n})
		if err != nil {
			t.Fatalf("stages %d: %v", n, err)
		}
		checkPlan(t, snap, job, p)
		if got := len(p.Replicas[0].Stages); len(p.Replicas) != 1 || got != n {
			t.Fatalf("stages %d gave %d replicas, %d stages: %s", n, len(p.Replicas), got, p.Reason)
		}
		if !strings.Contains(p.Reason, "parallel.stages fixes") {
			t.Errorf("stages %d: the reason does not say the count was fixed: %s", n, p.Reason)
		}
	}
	// Four nodes cannot make five stages: the plan has four and says why.
	p, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: 1, Stages: 5})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(p.Replicas[0].Stages); got != 4 || !strings.Contains(p.Reason, "no plan of 5 fits") {
		t.Fatalf("stages 5 on 4 nodes: %d stages: %s", got, p.Reason)
	}
}

// With the replica count left to auto, every replica of the plan has the fixed stage count.
func TestFixedStageCountAppliesToEveryReplica(t *testing.T) {
	snap, job := testnetLike(100, 20e-3, jobspec.SyncDiLoCo)
	p, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, Stages: 2})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, snap, job, p)
	for i, r := range p.Replicas {
		if len(r.Stages) != 2 {
			t.Fatalf("replica %d has %d stages, want 2: %s", i, len(r.Stages), p.Reason)
		}
	}
}

// A fixed replica count with one stage each is that many single-node replicas: the single
// pipelines the stage search adds must not displace the replicas the job fixed (the
// namespace test's replicas: 2, stages: 1 job ran on one node).
func TestFixedStagesKeepFixedReplicas(t *testing.T) {
	snap, job := testnetLike(100, 20e-3, jobspec.SyncEveryStep)
	for i := range snap.Nodes {
		snap.Nodes[i].MemoryBytes = 1 << 30 // each node holds the whole model
	}
	for _, r := range []int{2, 4} {
		p, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: r, Stages: 1})
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, snap, job, p)
		if len(p.Replicas) != r {
			t.Fatalf("replicas %d, stages 1 gave %d replicas: %s", r, len(p.Replicas), p.Reason)
		}
		for i, rep := range p.Replicas {
			if len(rep.Stages) != 1 {
				t.Fatalf("replica %d has %d stages, want 1: %s", i, len(rep.Stages), p.Reason)
			}
		}
	}
}
