package runner

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/scheduler"
)

// TestRunnerRejoinsADroppedReplicaInPlace: a DiLoCo job of three one-stage replicas on a, b
// and c; c's runner stops (a killed node), the leader continues without it (epoch 2, as
// scheduler.continueWithout makes it), and a fresh runner of c (the restarted node, no
// state) is brought back by epoch 3 (scheduler.rejoinDropped). c copies the current state
// from a live replica (state_copied names it), is admitted into the outer steps' quorum
// (rejoined), and trains to the end; a and b never stop or fail, nothing replans, and the
// job ends done with its progress never going back.
func TestRunnerRejoinsADroppedReplicaInPlace(t *testing.T) {
	s := smallSpec(t)
	s.Train.Steps, s.Train.EvalEvery = 600, 600
	s.Parallel.Sync, s.Parallel.InnerSteps = jobspec.SyncDiLoCo, 4
	s.Checkpoint = jobspec.Checkpoint{Every: 1000, Keep: 2}
	L := scheduler.ModelConfig(s).NumLayers()
	jp := scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "a", Last: L}}, {{Node: "b", Last: L}}, {{Node: "c", Last: L}}},
		Batches: []int{4, 4, 4}, MicroBatches: 2}
	c := newClusterOf(t, "a", "b", "c")
	c.submit(t, s, jp)
	commit := func(epoch uint64, p scheduler.JobPlan) {
		t.Helper()
		raw, _ := json.Marshal(p)
		if err := c.control.apply(consensus.PlanSetType, consensus.PlanSetRequest{JobID: "j", Epoch: epoch, Plan: raw, Time: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
	step := func() int {
		j, _, _ := c.control.fsm.Job("j")
		if len(j.Progress) == 0 {
			return 0
		}
		return j.Progress[len(j.Progress)-1].Step
	}

	done := make(chan consensus.Job, 1)
	go func() { done <- c.runUntil(t) }()
	testutil.WaitFor(t, time.Minute, "the first progress", func() bool { return step() > 0 })
	c.runners[2].Close() // c is gone
	without := jp
	without.Replicas, without.Batches, without.Continues = jp.Replicas[:2], jp.Batches[:2], true
	without.Built, without.Slots = 1, []int{0, 1}
	without.Dropped = []scheduler.DroppedReplica{{Slot: 2, Stages: jp.Replicas[2], Batch: 4}}
	commit(2, without)
	at := step()
	testutil.WaitFor(t, time.Minute, "the survivors training on", func() bool { return step() >= at+40 })

	c.replace(2, c.newRunner(t, "c")) // c restarts
	back := without
	back.Replicas, back.Batches, back.Slots, back.Dropped = jp.Replicas, jp.Batches, []int{0, 1, 2}, nil
	back.Rejoin = []string{"c"}
	commit(3, back)
	var j consensus.Job
	select {
	case j = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not finish")
	}
	if j.Status != consensus.JobDone {
		t.Fatalf("job %s: %+v", j.Status, j.Events)
	}
	var copied, rejoined string
	for _, ev := range j.Events {
		switch {
		case ev.Is(consensus.EventWorkerStopped) || ev.Is(consensus.EventWorkerFailed) || (ev.Is(consensus.EventReplan) && ev.Epoch > 1):
			t.Errorf("event %s: %s", ev.Kind, ev.Message)
		case ev.Is(consensus.EventStateCopied):
			copied = ev.Message
		case ev.Is(consensus.EventRejoined):
			rejoined = ev.Message
		}
	}
	t.Logf("%s; %s", copied, rejoined)
	if !strings.HasPrefix(copied, "c copied step ") || !(strings.Contains(copied, "from live replica a") || strings.Contains(copied, "from live replica b")) {
		t.Errorf("state_copied %q: want c's copy from a live replica", copied)
	}
	if !strings.HasPrefix(rejoined, "c was admitted") {
		t.Errorf("rejoined %q: want c admitted into the quorum", rejoined)
	}
	last := 0
	for _, p := range j.Progress {
		if p.Step < last {
			t.Errorf("progress went back from step %d to %d", last, p.Step)
		}
		last = p.Step
	}
}
