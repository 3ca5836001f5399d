package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// twoByTwo is a running DiLoCo job of two replicas of two stages on a, b, c, d.
func twoByTwo(t *testing.T) Job {
	t.Helper()
	s := spec()
	s.Parallel.Stages, s.Parallel.Replicas, s.Parallel.Sync = jobspec.Fixed(2), jobspec.Fixed(2), jobspec.SyncDiLoCo
	j := running(t, s, members("a", "b", "c", "d"))
	if len(j.Plan.Replicas) != 2 || len(j.Plan.Replicas[0]) != 2 || len(j.Plan.Replicas[1]) != 2 {
		t.Fatalf("plan %+v: want two replicas of two stages", j.Plan.Replicas)
	}
	return j
}

// TestLostStageIsRebuiltInPlace: the node of one stage of a two-stage DiLoCo replica
// dies. The job goes on in place without that replica (its other stage's failure, the
// lost pipeline neighbour's, restarts nothing); once the node is back, the next epoch
// brings the whole replica back in place, every one of its nodes rejoining (each stage
// copies from the live replica's stage that holds its layers); a failed rebuild drops it
// again, and it is not brought back a second time.
func TestLostStageIsRebuiltInPlace(t *testing.T) {
	j := twoByTwo(t)
	abcd := members("a", "b", "c", "d")
	lost := j.Plan.Replicas[1]
	victim, survivor := lost[1].Node, lost[0].Node
	j.Events = append(j.Events, Event{Kind: jobspec.EventWorkerFailed, Epoch: 1, By: survivor, Message: "recv from " + victim + ": stall"})
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(abcd, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	d := decision(t, h, s)
	if d.Kind != DecisionContinue || d.Plan.Has(victim) || d.Plan.Has(survivor) || len(d.Plan.Dropped) != 1 || len(d.Plan.Dropped[0].Stages) != 2 {
		t.Fatalf("decision %s on %v, dropped %+v: want the replica of %s dropped in place", d.Kind, d.Plan.Nodes(), d.Plan.Dropped, victim)
	}

	h.MemberList = abcd // the victim restarted with its identity
	d = decision(t, h, s)
	p := d.Plan
	if d.Kind != DecisionContinue || !slices.Equal(p.Rejoin, []string{survivor, victim}) || len(p.Dropped) != 0 ||
		fmt.Sprint(p.Replicas[1]) != fmt.Sprint(lost) || fmt.Sprint(p.Slots) != "[0 1]" || p.Built != 1 {
		t.Fatalf("decision %s: replicas %+v rejoin %v slots %v dropped %+v built %d; want replica 1 back whole, both its nodes rejoining",
			d.Kind, p.Replicas, p.Rejoin, p.Slots, p.Dropped, p.Built)
	}
	for _, st := range lost {
		if src := stageSources(*p, st, p.Rejoin); len(src) != 1 || src[0] == st.Node {
			t.Fatalf("stage %+v has sources %v; want the live replica's stage of its layers", st, src)
		}
	}

	h.JobList[0].Events = append(h.JobList[0].Events, Event{Kind: jobspec.EventWorkerFailed, Epoch: h.JobList[0].Epoch, By: victim, Message: "no state copy"})
	d = decision(t, h, s)
	if d.Kind != DecisionContinue || d.Plan.Has(victim) || d.Plan.Has(survivor) || len(d.Plan.Dropped) != 1 {
		t.Fatalf("after a failed rebuild: %s on %v, dropped %+v; want to go on without the replica", d.Kind, d.Plan.Nodes(), d.Plan.Dropped)
	}
	if ds, _ := h.Process(t.Context(), s); len(ds) != 0 {
		t.Fatalf("a replica whose rebuild failed was brought back: %+v", ds)
	}
}

// TestLostStageWithoutASourceStaysDropped: when no live replica's stage holds the layers
// of a stage of the dropped replica (another cut), the replica is not rebuilt.
func TestLostStageWithoutASourceStaysDropped(t *testing.T) {
	j := twoByTwo(t)
	r0 := j.Plan.Replicas[0]
	cut := r0[0].Last + 1
	if cut >= r0[1].Last {
		t.Skipf("the model has too few layers to cut differently (%+v)", r0)
	}
	j.Plan.Replicas[1][0].Last, j.Plan.Replicas[1][1].First = cut, cut
	victim := j.Plan.Replicas[1][1].Node
	abcd := members("a", "b", "c", "d")
	h := &Harness{SelfID: r0[0].Node, MemberList: with(abcd, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	if d := decision(t, h, s); d.Kind != DecisionContinue || len(d.Plan.Dropped) != 1 {
		t.Fatalf("decision %s dropped %+v: want the replica dropped in place", d.Kind, d.Plan.Dropped)
	}
	h.MemberList = abcd
	ds, _ := h.Process(t.Context(), s)
	for _, d := range ds {
		if d.Plan != nil && d.Plan.Has(victim) {
			t.Fatalf("rebuilt a replica whose stage [0, %d) no live stage holds: %+v", cut, d.Plan.Replicas)
		}
	}
}

// TestStageLostInEveryReplicaRestartsFromACheckpoint: with a stage lost in each replica
// no replica is whole, so the job restarts from its checkpoint as before.
func TestStageLostInEveryReplicaRestartsFromACheckpoint(t *testing.T) {
	j := twoByTwo(t)
	ms := members("a", "b", "c", "d")
	ms = with(with(ms, j.Plan.Replicas[0][1].Node, MemberDead), j.Plan.Replicas[1][0].Node, MemberDead)
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: ms, JobList: []Job{j}, Clock: t0}
	if d := decision(t, h, New(Config{})); d.Kind != DecisionReplan {
		t.Fatalf("decision %s: want a restart from a checkpoint", d.Kind)
	}
}

// TestLostStageIsRebuiltOnASpare: with a live node the plan does not use, a lost stage of
// a two-stage replica is rebuilt on it without waiting for the dead node: the replica
// comes back with the spare in the dead node's place, both its nodes rejoining. A spare
// with less memory than the dead node lent is not taken.
func TestLostStageIsRebuiltOnASpare(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spareMem int64
		rebuilt  bool
	}{{"as much memory", 1 << 30, true}, {"less memory", 1 << 20, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s := spec()
			s.Parallel.Stages, s.Parallel.Replicas, s.Parallel.Sync = jobspec.Fixed(2), jobspec.Fixed(2), jobspec.SyncDiLoCo
			ms := members("a", "b", "c", "d", "e")
			j := running(t, s, ms)
			var spare string
			for _, m := range ms {
				if !j.Plan.Has(m.ID) {
					spare = m.ID
				}
			}
			if spare == "" {
				t.Fatalf("plan %+v uses every node: no spare", j.Plan.Replicas)
			}
			for i := range ms {
				if ms[i].ID == spare {
					p := *ms[i].Profile
					p.MemoryBytes = tc.spareMem
					ms[i].Profile = &p
				}
			}
			lost := j.Plan.Replicas[1]
			victim, survivor := lost[1].Node, lost[0].Node
			h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(ms, victim, MemberDead), JobList: []Job{j}, Clock: t0}
			sch := New(Config{})
			if d := decision(t, h, sch); d.Kind != DecisionContinue || d.Plan.Has(survivor) || len(d.Plan.Dropped) != 1 {
				t.Fatalf("decision %s on %v: want the replica of %s dropped in place", d.Kind, d.Plan.Nodes(), victim)
			}
			ds, _ := h.Process(t.Context(), sch)
			var p *JobPlan
			for _, d := range ds {
				if d.Kind == DecisionContinue && d.Plan.Has(survivor) {
					p = d.Plan
				}
			}
			if !tc.rebuilt {
				if p != nil {
					t.Fatalf("rebuilt on a spare of %d bytes: %+v", tc.spareMem, p.Replicas)
				}
				return
			}
			if p == nil {
				t.Fatalf("decisions %+v: want the replica rebuilt on spare %s", ds, spare)
			}
			want := []Stage{lost[0], lost[1]}
			want[1].Node = spare
			if fmt.Sprint(p.Replicas[1]) != fmt.Sprint(want) || !slices.Equal(p.Rejoin, []string{survivor, spare}) || len(p.Dropped) != 0 {
				t.Fatalf("replicas %+v rejoin %v dropped %+v: want replica 1 back with %s in %s's place", p.Replicas, p.Rejoin, p.Dropped, spare, victim)
			}
			if built := p.BuiltPlan(); built.Replicas[1][1].Node != spare {
				t.Fatalf("built plan %+v: the rebuilt stages build with the spare in the dead node's place", built.Replicas)
			}
			// The spare is in the plan now, not a node that joined: the next rounds do not
			// move the job onto it from a checkpoint (its plan's inputs still name the
			// dead node, so that plan would look infeasible).
			live := stageNodes(slices.Concat(p.Replicas...))
			h.JobList[0].Checkpoints = []Checkpoint{ckpt(s, 1, 100, live...)}
			for i := 1; i <= 3; i++ {
				h.Clock = t0.Add(time.Duration(i) * 10 * time.Second)
				ds, _ := h.Process(t.Context(), sch)
				for _, d := range ds {
					if d.Kind != DecisionDecline {
						t.Fatalf("round %d after the rebuild decided %s: %s", i, d.Kind, d.Reason)
					}
				}
			}
		})
	}
}

// TestFailureOutsideTheLostReplicaRestarts: a worker failure of the replica that stayed
// whole is no consequence of the loss: the job restarts from a checkpoint, as before.
func TestFailureOutsideTheLostReplicaRestarts(t *testing.T) {
	j := twoByTwo(t)
	ms := members("a", "b", "c", "d")
	victim, whole := j.Plan.Replicas[1][1].Node, j.Plan.Replicas[0][1].Node
	j.Events = append(j.Events, Event{Kind: jobspec.EventWorkerFailed, Epoch: 1, By: whole, Message: "disk full"})
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(ms, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	if d := decision(t, h, New(Config{})); d.Kind != DecisionReplan {
		t.Fatalf("decision %s: want a restart from a checkpoint", d.Kind)
	}
}

// TestSuspectNodeIsNoReasonToGrow: a node of the plan that misses its heartbeats (suspect,
// not yet dead) with an idle node around does not make the job move onto the idle node
// from a checkpoint (the running plan looks infeasible without it): its loss, if it dies,
// is supervision's to handle in place.
func TestSuspectNodeIsNoReasonToGrow(t *testing.T) {
	s := spec()
	s.Parallel.Stages, s.Parallel.Replicas, s.Parallel.Sync = jobspec.Fixed(2), jobspec.Fixed(2), jobspec.SyncDiLoCo
	ms := members("a", "b", "c", "d", "e")
	j := running(t, s, ms)
	j.Checkpoints = []Checkpoint{ckpt(s, 1, 100, j.Plan.Nodes()...)}
	suspect := j.Plan.Replicas[1][1].Node
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(ms, suspect, MemberSuspect), JobList: []Job{j}, Clock: t0}
	ds, _ := h.Process(t.Context(), New(Config{}))
	for _, d := range ds {
		if d.Kind != DecisionDecline {
			t.Fatalf("with %s suspect: decided %s: %s", suspect, d.Kind, d.Reason)
		}
	}
}

// TestLeaderMissingFromItsMembersIsNoReasonToGrow: the leader's own node of the plan
// counts alive for liveness whatever its entry says; when that entry is not a candidate
// (suspect, or without its profile, for a moment), the running plan looks infeasible to
// the balancer, and CI's TestKilledStageIsRebuiltOnASpare saw the job moved onto the idle
// spare from a checkpoint ("node … is not in the snapshot") before any node was killed.
func TestLeaderMissingFromItsMembersIsNoReasonToGrow(t *testing.T) {
	s := spec()
	s.Parallel.Stages, s.Parallel.Replicas, s.Parallel.Sync = jobspec.Fixed(2), jobspec.Fixed(2), jobspec.SyncDiLoCo
	ms := members("a", "b", "c", "d", "e")
	j := running(t, s, ms)
	j.Checkpoints = []Checkpoint{ckpt(s, 1, 100, j.Plan.Nodes()...)}
	self := j.Plan.Replicas[0][0].Node
	for name, list := range map[string][]Member{
		"suspect":    with(ms, self, MemberSuspect),
		"no profile": withoutProfile(ms, self),
	} {
		h := &Harness{SelfID: self, MemberList: list, JobList: []Job{j}, Clock: t0}
		ds, _ := h.Process(t.Context(), New(Config{}))
		for _, d := range ds {
			if d.Kind != DecisionDecline {
				t.Errorf("leader's entry %s: decided %s: %s", name, d.Kind, d.Reason)
			}
		}
	}
}

// withoutProfile is ms with member id's profile gone.
func withoutProfile(ms []Member, id string) []Member {
	out := slices.Clone(ms)
	for i := range out {
		if out[i].ID == id {
			out[i].Profile = nil
		}
	}
	return out
}

// TestFasterSpareDoesNotMakeTheRunningPlanInfeasible: a job of fixed stages × replicas
// that holds all its nodes is weighed for growth with a faster idle node around; the
// inputs keep the plan's own nodes (the bound cut the slowest before, a plan node among
// them, and the running plan, infeasible without it, was moved from a checkpoint without
// the balancer's hysteresis).
func TestFasterSpareDoesNotMakeTheRunningPlanInfeasible(t *testing.T) {
	s := spec()
	s.Parallel.Stages, s.Parallel.Replicas, s.Parallel.Sync = jobspec.Fixed(2), jobspec.Fixed(2), jobspec.SyncDiLoCo
	ms := members("a", "b", "c", "d")
	j := running(t, s, ms)
	j.Checkpoints = []Checkpoint{ckpt(s, 1, 100, j.Plan.Nodes()...)}
	spare := members("e")[0]
	p := *spare.Profile
	p.GFLOPS *= 10
	spare.Profile = &p
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: append(slices.Clone(ms), spare), JobList: []Job{j}, Clock: t0}
	ds, _ := h.Process(t.Context(), New(Config{}))
	for _, d := range ds {
		if d.Kind == DecisionRebalance && strings.Contains(d.Reason, "infeasible") {
			t.Fatalf("decided %s: %s", d.Kind, d.Reason)
		}
	}
}
