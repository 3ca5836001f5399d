package testnet

import (
	"math"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// shrinkJob is issue 15's job: the default spec (the default model on builtin:gostd,
// micro-batches left to the planner) for 120 steps with seed 7, checkpointing every 20,
// as one pipeline over every node. Two settings pin the scenario: with micro-batches
// chosen by the planner the default model fits one 20 MiB node, so the auto placement may
// put the whole job on one node (the Raft leader, which then has no non-leader stage holder
// to lose) or form two DiLoCo replicas (and losing a node would then change the algorithm,
// not only the layout). Even placement in one replica gives every node a stage and trains
// the same math whatever the plan.
func shrinkJob() []byte {
	spec := jobspec.DefaultSpec()
	spec.Name = "shrink"
	spec.Train.Steps, spec.Train.Seed = 120, 7
	spec.Parallel.Replicas = jobspec.Fixed(1)
	spec.Placement.Strategy = jobspec.StrategyEven
	spec.Checkpoint.Every = 20
	b, _ := spec.Document()
	return b
}

// TestShrinkingMeshTradesMicroBatchesForMemory is issue 15's scenario: on the default
// 3-node testnet with 20 MiB per node (its default then: with micro-batches of 4 sequences, the old default, the
// default model fits neither one node nor two), the job's stage holder is SIGKILLed at step
// 50 of 120, one that is not the Raft leader. The leader replans on the survivors,
// choosing the micro-batch count again, and the job ends done in a later epoch with a final
// validation loss within 5% of the undisturbed run's. (Before micro_batches: auto, the
// replan failed: "no partition of 6 layers over 2 nodes fits memory with micro-batches of 4
// sequences".)
func TestShrinkingMeshTradesMicroBatchesForMemory(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	if testing.Short() {
		t.Skip("trains the default model twice for 120 steps: not in -short mode")
	}
	parallelScenario(t)
	topo := DefaultTopology(3)
	for i := range topo.Nodes {
		topo.Nodes[i].Memory = "20MiB" // the scenario's budget (the default is smaller now)
	}
	tn := startTestnet(t, topo)
	nodes := tn.Nodes()
	spec := shrinkJob()
	base := submitJob(t, tn, nodes[0], spec).waitDone(10 * time.Minute)
	baseVal := *base.Progress.ValLoss
	first := planOf(base)

	w := submitJob(t, tn, nodes[0], spec)
	victim := waitStageHolderAtStep(t, tn, w, currentLeader(t, tn), 50)
	if err := tn.Kill(victim.Spec.Name); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != victim {
			w.api = n.Client()
			break
		}
	}
	d := w.waitDone(10 * time.Minute)
	last := planOf(d)
	if d.Plan.Epoch < 2 || last.Has(victim.ID) {
		t.Fatalf("finished in epoch %d on %v; %s was killed", d.Plan.Epoch, last.Nodes(), victim.ID)
	}
	val := *d.Progress.ValLoss
	if math.Abs(val-baseVal)/baseVal > 0.05 {
		t.Errorf("final validation loss %.4f, undisturbed %.4f: more than 5%% apart", val, baseVal)
	}
	t.Logf("undisturbed: stages %v, %d micro-batches, val %.4f; killed %s at step 50: epoch %d resumed from step %d on stages %v with %d micro-batches, val %.4f",
		first.Replicas, first.MicroBatches, baseVal, victim.Spec.Name, d.Plan.Epoch, last.ResumeStep, last.Replicas, last.MicroBatches, val)
}

// waitStageHolderAtStep waits until w's job reaches step and returns a node other than the
// Raft leader that holds a stage of its plan.
func waitStageHolderAtStep(t *testing.T, tn *Testnet, w *jobWatch, leader string, step int) *Node {
	t.Helper()
	var victim *Node
	err := tn.WaitFor(func() bool {
		d := w.detail()
		if d.Status.Terminal() {
			t.Fatalf("the job ended %s before step %d", d.Status, step)
		}
		if d.Progress.Step < step || d.Plan == nil {
			return false
		}
		for _, n := range tn.Nodes() {
			if n.ID != leader && planOf(d).Has(n.ID) && victim == nil {
				victim = n
			}
		}
		if victim == nil {
			t.Fatalf("at step %d no node but the leader holds a stage: %v", step, planOf(d).Replicas)
		}
		return true
	}, 10*time.Minute)
	if err != nil {
		t.Fatalf("the job did not reach step %d: %v", step, err)
	}
	return victim
}
