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
// (rejoined), and trains on; a and b never stop or fail, nothing replans, and the progress
// never goes back. The job is long enough never to end by itself at any machine speed: it
// is cancelled once c has trained 20 steps past its admission.
func TestRunnerRejoinsADroppedReplicaInPlace(t *testing.T) {
	s := smallSpec(t)
	s.Train.Steps, s.Train.EvalEvery = 1_000_000, 1_000_000
	s.Parallel.Sync, s.Parallel.InnerSteps = jobspec.SyncDiLoCo, 4
	s.Checkpoint = jobspec.Checkpoint{Every: 1_000_000, Keep: 2}
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
	job := func() consensus.Job {
		j, _, _ := c.control.fsm.Job("j")
		return j
	}
	step := func() int {
		j := job()
		if len(j.Progress) == 0 {
			return 0
		}
		return j.Progress[len(j.Progress)-1].Step
	}
	event := func(kind consensus.EventKind) *consensus.Event {
		for _, ev := range job().Events {
			if ev.Is(kind) {
				return &ev
			}
		}
		return nil
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
	testutil.WaitFor(t, time.Minute, "the survivors training on", func() bool { return step() >= at+8 })

	c.replace(2, c.newRunner(t, "c")) // c restarts
	back := without
	back.Replicas, back.Batches, back.Slots, back.Dropped = jp.Replicas, jp.Batches, []int{0, 1, 2}, nil
	back.Rejoin = []string{"c"}
	commit(3, back)
	testutil.WaitFor(t, time.Minute, "c admitted", func() bool {
		return event(consensus.EventRejoined) != nil || event(consensus.EventWorkerFailed) != nil
	})
	if ev := event(consensus.EventRejoined); ev != nil {
		admitted := ev.Step
		testutil.WaitFor(t, time.Minute, "training past c's admission", func() bool { return step() >= admitted+20 })
	}
	if err := c.control.apply(consensus.JobStatusType, consensus.JobStatusRequest{ID: "j", Status: consensus.JobCancelled, Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var j consensus.Job
	select {
	case j = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not end")
	}
	var copied, rejoined string
	for _, ev := range j.Events {
		switch {
		case ev.Is(consensus.EventWorkerFailed) || (ev.Is(consensus.EventReplan) && ev.Epoch > 1) ||
			(ev.Is(consensus.EventWorkerStopped) && !strings.Contains(ev.Message, "stopped after")):
			t.Errorf("event %s: %s", ev.Kind, ev.Message)
		case ev.Is(consensus.EventWorkerStopped) && ev.Epoch < 3:
			t.Errorf("a worker stopped before the job was cancelled: %s", ev.Message)
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
