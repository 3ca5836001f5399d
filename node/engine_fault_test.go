package node

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestStageNodeLossResumesFromCheckpoint: a node holding a stage stops mid-job; the leader
// commits a new epoch without it that resumes from the last complete checkpoint (whose
// files the other stages copied), and the job finishes done, having redone at most
// checkpoint.every steps.
func TestStageNodeLossResumesFromCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on four in-process nodes and stops one")
	}
	nodes := startEngineMesh(t, 4)
	first := nodes[0]
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 4, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "for i := range n { sum += i * i } // mesh\n", 1500)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 40, 8, 2, 20, 2
	spec.Parallel.Replicas = jobspec.Fixed(1)
	spec.Placement.Strategy = jobspec.StrategyEven
	spec.Checkpoint.Every = 5
	sub := consensus.JobSummary{ID: submitThroughAPI(t, first, spec)}

	leader := func() *Node {
		for _, n := range nodes {
			if c := n.Consensus(); c != nil && c.IsLeader() {
				return n
			}
		}
		return nil
	}
	job := func() consensus.Job {
		j, _, _ := first.Consensus().Job(context.Background(), sub.ID, false)
		return j
	}
	// Pick a stage node that is not the leader, wait until a complete checkpoint survives
	// without it (its files copied to other holders), then stop it.
	waitFor(t, 30*time.Second, "a plan", func() bool { j := job(); return j.CurrentPlan() != nil })
	var jp JobPlan
	cur := job()
	json.Unmarshal(cur.CurrentPlan().Plan, &jp)
	var victim *Node
	for _, n := range nodes {
		for _, id := range jp.Nodes() {
			if n != leader() && n != first && n.ID().String() == id {
				victim = n
			}
		}
	}
	if victim == nil {
		t.Fatalf("no stage node to stop besides the leader and the observer: plan %+v", jp.Replicas)
	}
	waitFor(t, 60*time.Second, "a checkpoint that survives the victim", func() bool {
		_, ok := completeCheckpoint(job(), 6, func(id string) bool { return id != victim.ID().String() })
		return ok
	})
	victim.Close()
	var j consensus.Job
	waitFor(t, 120*time.Second, "the job to finish", func() bool {
		j = job()
		return j.Status.Terminal()
	})
	if j.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", j.Status, j.Events)
	}
	if j.Epoch() < 2 {
		t.Fatalf("job finished in epoch %d: no replan after the node stopped", j.Epoch())
	}
	var next JobPlan
	json.Unmarshal(j.CurrentPlan().Plan, &next)
	for _, id := range next.Nodes() {
		if id == victim.ID().String() {
			t.Fatalf("the new plan still uses the stopped node: %+v", next.Replicas)
		}
	}
	if next.ResumeStep == 0 || next.ResumeStep%spec.Checkpoint.Every != 0 {
		t.Fatalf("the new epoch resumes from step %d", next.ResumeStep)
	}
	for _, ev := range j.Events {
		if ev.Kind == eventReplan {
			t.Logf("replan event: %s", ev.Message)
		}
	}
}
