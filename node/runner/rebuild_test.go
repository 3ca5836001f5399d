package runner

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/scheduler"
)

// TestRunnerRebuildsALostStageInPlace: a DiLoCo job of two replicas of two stages, a0 a1
// and b0 b1. b1's runner stops (a killed node); the leader continues without replica b
// (epoch 2: b0's worker stops, its pipeline broken), and once b1 is back (a fresh runner,
// no state) epoch 3 rebuilds the replica (scheduler.rejoinDropped): b0 and b1 each copy
// their layers from a0 and a1 at the same step (state_copied), both are admitted into
// their outer steps' quorum (rejoined), and the job trains on. a0 and a1 never stop or
// fail, nothing replans, and the progress never goes back. The job is long enough never
// to end by itself: it is cancelled once the rebuilt replica trained 20 steps past its
// admission.
func TestRunnerRebuildsALostStageInPlace(t *testing.T) {
	t.Run("the node restarted", func(t *testing.T) { rebuildInRunners(t, false) })
	t.Run("on a spare", func(t *testing.T) { rebuildInRunners(t, true) })
}

// rebuildInRunners runs TestRunnerRebuildsALostStageInPlace; with spare, b1 never comes
// back and node x, idle until then, takes its stage over.
func rebuildInRunners(t *testing.T, spare bool) {
	s := smallSpec(t)
	s.Train.Steps, s.Train.EvalEvery = 1_000_000, 1_000_000
	s.Parallel.Sync, s.Parallel.InnerSteps = jobspec.SyncDiLoCo, 4
	s.Checkpoint = jobspec.Checkpoint{Every: 1_000_000, Keep: 2}
	L := scheduler.ModelConfig(s).NumLayers()
	half := L / 2
	jp := scheduler.JobPlan{Replicas: [][]scheduler.Stage{
		{{Node: "a0", Last: half}, {Node: "a1", First: half, Last: L}},
		{{Node: "b0", Last: half}, {Node: "b1", First: half, Last: L}}},
		Batches: []int{4, 4}, MicroBatches: 2}
	c := newClusterOf(t, "a0", "a1", "b0", "b1", "x")
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
	count := func(kind consensus.EventKind) int {
		n := 0
		for _, ev := range job().Events {
			if ev.Is(kind) {
				n++
			}
		}
		return n
	}

	done := make(chan consensus.Job, 1)
	go func() { done <- c.runUntil(t) }()
	testutil.WaitFor(t, time.Minute, "the first progress", func() bool { return step() > 0 })
	c.runners[3].Close() // b1 is gone
	without := jp
	without.Replicas, without.Batches, without.Continues = jp.Replicas[:1], jp.Batches[:1], true
	without.Built, without.Slots = 1, []int{0}
	without.Dropped = []scheduler.DroppedReplica{{Slot: 1, Stages: jp.Replicas[1], Batch: 4}}
	commit(2, without)
	at := step()
	testutil.WaitFor(t, time.Minute, "the survivors training on", func() bool { return step() >= at+8 })

	second := "b1"
	back := without
	back.Replicas, back.Batches, back.Slots, back.Dropped = jp.Replicas, jp.Batches, []int{0, 1}, nil
	if spare {
		second = "x"
		back.Replicas = [][]scheduler.Stage{jp.Replicas[0], {jp.Replicas[1][0], jp.Replicas[1][1]}}
		back.Replicas[1][1].Node = "x"
	} else {
		c.replace(3, c.newRunner(t, "b1")) // b1 restarts
	}
	back.Rejoin = []string{"b0", second}
	commit(3, back)
	testutil.WaitFor(t, time.Minute, "b0 and b1 admitted", func() bool {
		return count(consensus.EventRejoined) == 2 || count(consensus.EventWorkerFailed) > 0
	})
	admitted := step()
	testutil.WaitFor(t, time.Minute, "training past the admission", func() bool { return step() >= admitted+20 })
	if err := c.control.apply(consensus.JobStatusType, consensus.JobStatusRequest{ID: "j", Status: consensus.JobCancelled, Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var j consensus.Job
	select {
	case j = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not end")
	}
	copied := map[string]int{}
	rejoined := 0
	for _, ev := range j.Events {
		switch {
		case ev.Is(consensus.EventWorkerFailed) || (ev.Is(consensus.EventReplan) && ev.Epoch > 1):
			t.Errorf("event %s: %s", ev.Kind, ev.Message)
		case ev.Is(consensus.EventWorkerStopped) && ev.Epoch < 3 && !strings.HasPrefix(ev.Message, "b0 "):
			t.Errorf("a worker other than b0's stopped before the job was cancelled: %s", ev.Message)
		case ev.Is(consensus.EventStateCopied):
			var who, from string
			var at int
			if _, err := fmt.Sscanf(ev.Message, "%s copied step %d from live replica %s", &who, &at, &from); err != nil {
				t.Errorf("state_copied %q: %v", ev.Message, err)
			}
			want := map[string]string{"b0": "a0", second: "a1"}[who]
			if from != want+":" && from != want {
				t.Errorf("state_copied %q: want %s's copy from %s", ev.Message, who, want)
			}
			copied[who] = at
			t.Log(ev.Message)
		case ev.Is(consensus.EventRejoined):
			rejoined++
			t.Log(ev.Message)
		}
	}
	if len(copied) != 2 || copied["b0"] != copied[second] || copied["b0"]%s.Parallel.InnerSteps != 0 {
		t.Errorf("copies %v: want b0's and %s's at one outer-step boundary", copied, second)
	}
	if rejoined != 2 {
		t.Errorf("%d rejoined events, want b0's and b1's", rejoined)
	}
	last := 0
	for _, p := range j.Progress {
		if p.Step < last {
			t.Errorf("progress went back from step %d to %d", last, p.Step)
		}
		last = p.Step
	}
}
