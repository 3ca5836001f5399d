package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestDroppedReplicaRejoinsInPlace: the node of one DiLoCo replica of three dies (the job
// continues without it), then comes back: the next epoch continues in place with its
// replica appended (the reporting replica stays first), the node listed to copy its state
// from a live replica, and the plan the workers were built with (epoch 1's) recoverable
// from it. When that node then reports a failed worker, the job goes on without it again
// (no restart from a checkpoint), and it is not brought back a second time.
func TestDroppedReplicaRejoinsInPlace(t *testing.T) {
	diloco := spec()
	diloco.Parallel.Stages, diloco.Parallel.Replicas, diloco.Parallel.Sync = jobspec.Fixed(1), jobspec.Fixed(3), jobspec.SyncDiLoCo
	j := running(t, diloco, abc)
	j.Plan.Batches, j.Plan.DataShards = []int{2, 4, 6}, [][]int{{0}, {1}, {2}}
	original := *j.Plan
	victim := j.Plan.Replicas[1][0].Node
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(abc, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	d := decision(t, h, s)
	if d.Kind != DecisionContinue || d.Plan.Has(victim) || d.Plan.Built != 1 || len(d.Plan.Dropped) != 1 || d.Plan.Dropped[0].Slot != 1 {
		t.Fatalf("decision %s on %v, built %d, dropped %+v; want to continue without %s, replica 1 of epoch 1 dropped",
			d.Kind, d.Plan.Nodes(), d.Plan.Built, d.Plan.Dropped, victim)
	}

	h.MemberList = abc // the victim restarted with its identity
	d = decision(t, h, s)
	p := d.Plan
	if d.Kind != DecisionContinue || !p.Continues || !p.Has(victim) || !slices.Equal(p.Rejoin, []string{victim}) || len(p.Dropped) != 0 || p.ResumeStep != 0 {
		t.Fatalf("decision %s continues=%v on %v, rejoin %v, dropped %+v; want %s back in place", d.Kind, p.Continues, p.Nodes(), p.Rejoin, p.Dropped, victim)
	}
	if p.Replicas[0][0] != original.Replicas[0][0] || fmt.Sprint(p.Batches) != "[2 6 4]" || fmt.Sprint(p.Slots) != "[0 2 1]" ||
		fmt.Sprint(p.DataShards) != "[[0] [2] [1]]" {
		t.Fatalf("plan %+v batches %v slots %v shards %v: the survivors stay first, the rejoined replica is appended with its batch and shards",
			p.Replicas, p.Batches, p.Slots, p.DataShards)
	}
	built := p.BuiltPlan()
	if fmt.Sprint(built.Replicas) != fmt.Sprint(original.Replicas) || fmt.Sprint(built.Batches) != fmt.Sprint(original.Batches) ||
		fmt.Sprint(built.DataShards) != fmt.Sprint(original.DataShards) || built.Continues {
		t.Fatalf("built plan %+v %v, want epoch 1's %+v %v", built.Replicas, built.Batches, original.Replicas, original.Batches)
	}
	if got := h.JobList[0]; got.Epoch != 3 || len(got.Events) != 0 {
		t.Fatalf("job: epoch %d events %+v; want epoch 3 and no replan", got.Epoch, got.Events)
	}
	if ds, _ := h.Process(context.Background(), s); len(ds) != 0 {
		t.Fatalf("the round after the rejoin decided %+v", ds)
	}

	h.JobList[0].Events = append(h.JobList[0].Events, Event{Kind: jobspec.EventWorkerFailed, Epoch: 3, Message: "no state copy", By: victim})
	d = decision(t, h, s)
	if d.Kind != DecisionContinue || d.Plan.Has(victim) || len(d.Plan.Dropped) != 1 || d.Plan.Built != 1 {
		t.Fatalf("after a failed rejoin: %s on %v, dropped %+v; want to continue without %s", d.Kind, d.Plan.Nodes(), d.Plan.Dropped, victim)
	}
	if ds, _ := h.Process(context.Background(), s); len(ds) != 0 {
		t.Fatalf("a node whose rejoin failed was brought back: %+v", ds)
	}
}

// TestRejoinedEpochIsNotRestartedForItsShares: the epoch that brought a dropped DiLoCo
// replica back in place is measured far slower than the prediction it carried over, and
// its nodes' compute times tell one node apart (a loaded host's noise, a fresh process):
// the balancer's best plan on those speeds is the same replicas on the same nodes with
// other batch shares, nothing to move. Adopting it would restart every replica from a
// checkpoint, so the plan stays and its prediction is recalibrated in place.
func TestRejoinedEpochIsNotRestartedForItsShares(t *testing.T) {
	diloco := spec()
	diloco.Parallel.Stages, diloco.Parallel.Replicas, diloco.Parallel.Sync = jobspec.Fixed(1), jobspec.Fixed(3), jobspec.SyncDiLoCo
	j := running(t, diloco, abc)
	j.Epochs = []EpochPlan{{Epoch: 1, SetAt: t0, Plan: j.Plan}}
	victim := j.Plan.Replicas[1][0].Node
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(abc, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	decision(t, h, s) // continue without the victim
	h.MemberList = abc
	if d := decision(t, h, s); len(d.Plan.Rejoin) != 1 {
		t.Fatalf("%s %+v, want the victim back in place", d.Kind, d.Plan.Rejoin)
	}
	next := &h.JobList[0]
	speeds := map[string]float64{}
	for _, n := range next.Plan.Inputs.Snapshot.Nodes {
		speeds[n.ID] = n.GFLOPS
	}
	predicted, ok := next.Plan.stageCompute(speeds)
	if !ok {
		t.Fatal("the plan does not price")
	}
	slow := next.Plan.Replicas[0][0].Node
	for i := range 10 {
		at := t0.Add(time.Duration(10+2*i) * time.Second)
		next.Progress = append(next.Progress, Sample{Time: at, Epoch: next.Epoch, Step: 300 + 50*i, StepS: 4 * next.Plan.PredictedStepS})
		for _, id := range next.Plan.Nodes() {
			c := 4 * predicted[id]
			if id == slow {
				c *= 2
			}
			next.StageTimes = append(next.StageTimes, StageSample{Epoch: next.Epoch, Step: 300 + 50*i, Node: id, ComputeS: c})
		}
	}
	next.Checkpoints = []Checkpoint{ckpt(diloco, next.Epoch, 700, next.Plan.Nodes()...)}
	h.Clock = t0.Add(time.Minute)
	ds, err := h.Process(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Kind != DecisionContinue || !strings.HasPrefix(ds[0].Reason, recalibratedReason) {
		t.Fatalf("decisions %+v: want the plan recalibrated in place, no restart", ds)
	}
}
