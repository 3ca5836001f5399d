package node

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/scheduler"
)

// TestStageNodeLossResumesFromCheckpoint: a node holding a stage stops mid-job — a
// follower, or the Raft leader itself; the (new) leader commits a new epoch without it that
// resumes from the last complete checkpoint (whose files the other stages copied), and the
// job finishes done.
func TestStageNodeLossResumesFromCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on four in-process nodes and stops one")
	}
	for _, victimIsLeader := range []bool{false, true} {
		name := "follower"
		if victimIsLeader {
			name = "leader"
		}
		t.Run(name, func(t *testing.T) { stageNodeLoss(t, victimIsLeader) })
	}
}

func stageNodeLoss(t *testing.T, victimIsLeader bool) {
	nodes := startEngineMesh(t, 4)
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 4, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "for i := range n { sum += i * i } // mesh\n", 1500)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 40, 8, jobspec.Fixed(2), 20, 2
	spec.Parallel.Replicas = jobspec.Fixed(1)
	spec.Placement.Strategy = jobspec.StrategyEven // every node holds a stage
	spec.Checkpoint.Every = 5

	var victim, observer *Node
	for _, n := range nodes {
		if n.Consensus().IsLeader() == victimIsLeader && victim == nil {
			victim = n
		}
	}
	for _, n := range nodes {
		if n != victim && observer == nil {
			observer = n
		}
	}
	id := submitThroughAPI(t, observer, spec)
	job := func() consensus.Job {
		j, _, _ := observer.Consensus().Job(context.Background(), id, false)
		return j
	}
	// Wait until a complete checkpoint survives without the victim (its files copied to
	// other holders), then stop it.
	testutil.WaitFor(t, 60*time.Second, "a checkpoint that survives the victim", func() bool {
		return hasCompleteCheckpoint(job(), 6, func(n string) bool { return n != victim.ID().String() })
	})
	victim.Close()
	var j consensus.Job
	testutil.WaitFor(t, 120*time.Second, "the job to finish", func() bool {
		j = job()
		return j.Status.Terminal()
	})
	if j.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", j.Status, j.Events)
	}
	checkReplannedWithout(t, j, victim.ID().String())
	checkExports(t, observer, j)
}

// checkReplannedWithout checks that a finished job was replanned without victim, resuming
// from a checkpoint and redoing at most checkpoint.every steps. The replan is the epoch whose
// replan event names victim dead; later epochs (an in-place recalibration) may follow it.
func checkReplannedWithout(t *testing.T, j consensus.Job, victim string) {
	t.Helper()
	spec := j.Spec
	var epoch uint64
	for _, ev := range j.Events {
		if ev.Is(consensus.EventReplan) && strings.Contains(ev.Message, victim) {
			t.Logf("replan event (epoch %d): %s", ev.Epoch, ev.Message)
			epoch = ev.Epoch
		}
	}
	if epoch < 2 {
		t.Fatalf("no replan names %s after it stopped; events %+v", victim, j.Events)
	}
	for _, pe := range j.Plans {
		if pe.Epoch < epoch {
			continue
		}
		var p scheduler.JobPlan
		if err := json.Unmarshal(pe.Plan, &p); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(p.Nodes(), victim) {
			t.Fatalf("epoch %d still uses the stopped node: %+v", pe.Epoch, p.Replicas)
		}
		if pe.Epoch == epoch && (p.ResumeStep == 0 || p.ResumeStep%spec.Checkpoint.Every != 0) {
			t.Fatalf("the new epoch resumes from step %d", p.ResumeStep)
		}
	}
	// Checkpoints are replicated before they are committed and a step waits for the
	// previous step's checkpoint, so the new epoch redoes at most checkpoint.every steps.
	redone, ok := scheduler.StepsRedone(scheduler.EventsFromRecord(j.Events))[epoch]
	if !ok || redone > spec.Checkpoint.Every {
		t.Fatalf("epoch %d redid %d steps (reported: %v), want ≤ checkpoint.every = %d; events %+v",
			epoch, redone, ok, spec.Checkpoint.Every, j.Events)
	}
	t.Logf("epoch %d redid %d steps", epoch, redone)
}

// checkExports checks that the latest complete checkpoint of j exports, through observer,
// as one GPT-2-named file that loads as a model.
func checkExports(t *testing.T, observer *Node, j consensus.Job) {
	t.Helper()
	id := j.ID
	// The latest complete checkpoint exports as one GPT-2-named file that loads as a model.
	var cks []CheckpointView
	getJSON(t, observer, "/v1/jobs/"+id+"/checkpoints", &cks)
	if len(cks) == 0 || !cks[len(cks)-1].Complete {
		t.Fatalf("checkpoints %+v", cks)
	}
	b, err := observer.exportCheckpoint(context.Background(), j, -1)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := model.DecodeSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := model.ConfigFromCheckpoint(tf, 0)
	if err != nil || model.LoadParams(tf, model.New(cfg, 0).Params()) != nil {
		t.Fatalf("the export does not load as the job's model: %+v %v", cfg, err)
	}
}

// TestJoinedNodeIsUsedAtTheNextPlan: a job runs on one node; a second node joins mid-job,
// is measured, and the leader commits a new epoch that uses it (the balancer's Replan finds
// two replicas faster by more than its margin), resuming from the latest checkpoint; the
// job finishes done.
func TestJoinedNodeIsUsedAtTheNextPlan(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("trains for a while on in-process nodes while one joins")
	}
	nodes := startEngineMesh(t, 1)
	first := nodes[0]
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 64, Heads: 2, Context: 64, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "if err != nil { return fmt.Errorf(\"join: %w\", err) }\n", 1500)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 3000, 16, jobspec.Fixed(2), 500, 5
	spec.Checkpoint.Every = 5
	id := submitThroughAPI(t, first, spec)
	job := func() consensus.Job {
		j, _, _ := first.Consensus().Job(context.Background(), id, false)
		return j
	}
	testutil.WaitFor(t, 60*time.Second, "a checkpoint on the single node", func() bool {
		ok := hasCompleteCheckpoint(job(), 4, nil)
		return ok
	})
	joined := startNode(t, testConfig(t, first.Status().Addrs...))
	var j consensus.Job
	testutil.WaitFor(t, 360*time.Second, "the job to finish", func() bool {
		j = job()
		return j.Status.Terminal()
	})
	if j.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", j.Status, j.Events)
	}
	used := false
	for _, p := range j.Plans {
		var jp scheduler.JobPlan
		json.Unmarshal(p.Plan, &jp)
		for _, n := range jp.Nodes() {
			used = used || n == joined.ID().String()
		}
	}
	if !used {
		t.Fatalf("the joined node is in no plan epoch; events %+v", j.Events)
	}
	for _, ev := range j.Events {
		if ev.Is(consensus.EventRebalance) {
			t.Logf("rebalance event: %s", ev.Message)
		}
	}
}

// hasCompleteCheckpoint reports whether some checkpoint of j holds every one of numLayers
// layers on holders for which live says true (nil: all).
func hasCompleteCheckpoint(j consensus.Job, numLayers int, live func(string) bool) bool {
	for _, m := range j.Checkpoints {
		if scheduler.CheckpointSurvives(scheduler.CheckpointFromRecord(m), numLayers, live) {
			return true
		}
	}
	return false
}
