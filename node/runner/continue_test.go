package runner

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/scheduler"
)

// TestRunnerContinuesInPlaceWithoutALostReplica: a DiLoCo job of three one-stage replicas
// on a, b and c; c's runner stops early in the job (as a killed node does: no event), and the leader
// commits the plan without c that continues in place, as scheduler.continueWithout makes
// it. a and b keep their workers: neither stops nor fails, nothing restores, the progress
// they report never goes back, it comes from epoch 2 too, and the job ends done.
func TestRunnerContinuesInPlaceWithoutALostReplica(t *testing.T) {
	s := smallSpec(t)
	s.Train.Steps, s.Train.EvalEvery = 1500, 1500
	s.Parallel.Sync, s.Parallel.InnerSteps = jobspec.SyncDiLoCo, 4
	s.Checkpoint = jobspec.Checkpoint{Every: 1000, Keep: 2}
	L := scheduler.ModelConfig(s).NumLayers()
	jp := scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "a", Last: L}}, {{Node: "b", Last: L}}, {{Node: "c", Last: L}}},
		Batches: []int{4, 4, 4}, MicroBatches: 2}
	c := newClusterOf(t, "a", "b", "c")
	c.submit(t, s, jp)

	done := make(chan consensus.Job, 1)
	go func() { done <- c.runUntil(t) }()
	testutil.WaitFor(t, time.Minute, "the first evaluation", func() bool {
		j, _, _ := c.control.fsm.Job("j")
		return len(j.Progress) > 0
	})
	c.runners[2].Close() // c is gone
	next := jp
	next.Replicas, next.Batches, next.Continues = jp.Replicas[:2], jp.Batches[:2], true
	raw, _ := json.Marshal(next)
	if err := c.control.apply(consensus.PlanSetType, consensus.PlanSetRequest{JobID: "j", Epoch: 2, Plan: raw, Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	var j consensus.Job
	select {
	case j = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the job did not finish")
	}
	if j.Status != consensus.JobDone {
		t.Fatalf("job %s: %+v", j.Status, j.Events)
	}
	for _, ev := range j.Events {
		if ev.Is(consensus.EventWorkerStopped) || ev.Is(consensus.EventWorkerFailed) {
			t.Errorf("a survivor's worker ended: %+v", ev)
		}
	}
	last, epoch2 := 0, false
	for _, p := range j.Progress {
		if p.Step < last {
			t.Errorf("progress went back from step %d to %d", last, p.Step)
		}
		last, epoch2 = p.Step, epoch2 || p.Epoch == 2
	}
	if !epoch2 || last != s.Train.Steps {
		t.Errorf("progress reached step %d, epoch 2 reported %v", last, epoch2)
	}
}

// TestRestartedNodeRefusesOnlyACurrentInPlaceEpoch: a restarted node holds no worker, and
// its FSM, catching up, may show an in-place epoch that named it before it died. It refuses
// that epoch (a failed worker, so the leader replans) only while the leader still holds it
// current; once the leader has moved on (the node had been dropped and brought back
// by the time its FSM replayed the epoch), it stays silent.
func TestRestartedNodeRefusesOnlyACurrentInPlaceEpoch(t *testing.T) {
	for _, superseded := range []bool{false, true} {
		s := smallSpec(t)
		s.Parallel.Sync = jobspec.SyncDiLoCo
		L := scheduler.ModelConfig(s).NumLayers()
		jp := scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "a", Last: L}}, {{Node: "b", Last: L}}},
			Batches: []int{4, 4}, MicroBatches: 2}
		c := newClusterOf(t, "a", "b")
		c.submit(t, s, jp)
		inPlace := jp
		inPlace.Continues, inPlace.Built = true, 1
		if err := c.setPlan(2, inPlace); err != nil {
			t.Fatal(err)
		}
		seen, _ := c.control.fsm.Jobs() // what the restarted node's FSM shows
		if superseded {
			without := jp
			without.Replicas, without.Batches, without.Continues, without.Built = jp.Replicas[1:], jp.Batches[1:], true, 1
			if err := c.setPlan(3, without); err != nil {
				t.Fatal(err)
			}
		}
		r := c.newRunner(t, "a")
		r.Reconcile(seen)
		r.Close() // waits for the refusal's report
		j, _, err := c.control.fsm.Job("j")
		if err != nil {
			t.Fatal(err)
		}
		var refused int
		for _, ev := range j.Events {
			if ev.Is(consensus.EventWorkerFailed) {
				refused++
				if ev.Epoch != 2 {
					t.Errorf("refused epoch %d, want 2", ev.Epoch)
				}
			}
		}
		if want := map[bool]int{false: 1, true: 0}[superseded]; refused != want {
			t.Errorf("superseded %v: %d refusals, want %d: %+v", superseded, refused, want, j.Events)
		}
	}
}
