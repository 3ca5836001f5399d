package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"

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
