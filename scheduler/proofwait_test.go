package scheduler

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// pending returns ms with each of ids awaiting its speed proof: no profile to plan on, and
// ProofPending, as the node's members() reports a peer the leader has not proved yet.
func pending(ms []Member, ids ...string) []Member {
	out := append([]Member(nil), ms...)
	for i := range out {
		for _, id := range ids {
			if out[i].ID == id {
				out[i].Profile, out[i].ProofPending = nil, true
			}
		}
	}
	return out
}

// unproven returns ms with each of ids out of plans without a pending proof: it proved
// nothing (late) or lied.
func unproven(ms []Member, ids ...string) []Member {
	out := pending(ms, ids...)
	for i := range out {
		for _, id := range ids {
			if out[i].ID == id {
				out[i].ProofPending = false
			}
		}
	}
	return out
}

// fourNodeSpec asks for at least 4 nodes, as the quick start's job does.
func fourNodeSpec() jobspec.Spec {
	s := jobspec.DefaultSpec()
	s.Placement.MinNodes = 4
	return s
}

// process runs one round at clock and returns its only decision.
func process(t *testing.T, h *Harness, s *Scheduler, clock time.Time) Decision {
	t.Helper()
	h.Clock = clock
	return decision(t, h, s)
}

// TestFirstPlanWaitsForPendingProofs: a job submitted before the leader proved every
// member's speed is not failed for min_nodes: it moves to planning with a status that
// says how many proofs it waits for, commits nothing more while it waits, and is planned
// on all four nodes once the proofs are in.
func TestFirstPlanWaitsForPendingProofs(t *testing.T) {
	all := members("a", "b", "c", "d")
	h := &Harness{SelfID: "a", MemberList: pending(all, "c", "d"),
		JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0}}}
	s := New(Config{ProofWait: time.Minute})

	d := process(t, h, s, t0)
	if d.Kind != DecisionWait || !strings.Contains(d.Reason, "waiting for 2 members' speed proofs") {
		t.Fatalf("decision %s %q, want a wait for 2 speed proofs", d.Kind, d.Reason)
	}
	checkCommits(t, h.Commits, []string{"status j planning: waiting for 2 members' speed proofs, until 03:05:05 UTC"})

	h.MemberList = pending(all, "d")
	if d := process(t, h, s, t0.Add(59*time.Second)); d.Kind != DecisionWait || d.Commits() {
		t.Fatalf("with one proof pending: decision %s %q (commits %v), want a wait that commits nothing", d.Kind, d.Reason, d.Commits())
	}
	if len(h.Commits) != 1 {
		t.Fatalf("commits %q, want only the move to planning", h.Commits)
	}

	h.MemberList = all
	d = process(t, h, s, t0.Add(59*time.Second))
	if d.Kind != DecisionPlan || len(d.Plan.Nodes()) != 4 {
		t.Fatalf("decision %s %q, want a plan on 4 nodes", d.Kind, d.Reason)
	}
	checkCommits(t, h.Commits, []string{"status j planning", "plan j epoch 1", "status j running: epoch 1"})
	if len(s.waiting) != 0 {
		t.Errorf("the scheduler still remembers waits %v", s.waiting)
	}
}

// TestProofWaitIsBounded: a proof still pending after ProofWait is not waited for: the
// job is planned on the members that proved, and a min_nodes failure names the members
// left out. The bound counts from the job's submission, so a new leader that first sees
// the job later does not wait the whole bound again.
func TestProofWaitIsBounded(t *testing.T) {
	ms := pending(members("a", "b", "c", "d"), "d")
	wait := 30 * time.Second
	t.Run("min_nodes fails after the bound, naming the unproven", func(t *testing.T) {
		h := &Harness{SelfID: "a", MemberList: ms,
			JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0}}}
		s := New(Config{ProofWait: wait})
		if d := process(t, h, s, t0.Add(wait-time.Nanosecond)); d.Kind != DecisionWait {
			t.Fatalf("before the bound: decision %s %q, want a wait", d.Kind, d.Reason)
		}
		d := process(t, h, s, t0.Add(wait))
		if d.Kind != DecisionFail || !strings.Contains(d.Reason, "min_nodes: 3 nodes can run the job, it asks for at least 4") ||
			!strings.Contains(d.Reason, "had not proved their speed after 30s, left out: d") {
			t.Fatalf("at the bound: decision %s %q, want a min_nodes failure naming d", d.Kind, d.Reason)
		}
		checkCommits(t, h.Commits, []string{"status j planning: waiting", "status j failed: no feasible plan"})
	})
	t.Run("planned on those proved after the bound", func(t *testing.T) {
		h := &Harness{SelfID: "a", MemberList: ms,
			JobList: []Job{{ID: "j", Spec: jobspec.DefaultSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0}}}
		s := New(Config{ProofWait: wait})
		if d := process(t, h, s, t0); d.Kind != DecisionWait {
			t.Fatalf("decision %s %q, want a wait", d.Kind, d.Reason)
		}
		d := process(t, h, s, t0.Add(wait))
		if d.Kind != DecisionPlan || d.Plan.Has("d") {
			t.Fatalf("decision %s %q, want a plan without d", d.Kind, d.Reason)
		}
	})
	t.Run("counted from submission", func(t *testing.T) {
		h := &Harness{SelfID: "b", MemberList: ms,
			JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobPlanning, SubmittedAt: t0.Add(-wait + time.Second)}}}
		s := New(Config{ProofWait: wait})
		if d := process(t, h, s, t0); d.Kind != DecisionWait || d.Commits() {
			t.Fatalf("decision %s %q, want a wait that commits nothing (the job is planning already)", d.Kind, d.Reason)
		}
		if d := process(t, h, s, t0.Add(time.Second)); d.Kind != DecisionFail {
			t.Fatalf("a second after the bound from submission: decision %s %q, want a failure", d.Kind, d.Reason)
		}
	})
	t.Run("a submission time ahead of this clock waits no longer than the bound", func(t *testing.T) {
		h := &Harness{SelfID: "a", MemberList: ms,
			JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0.Add(time.Hour)}}}
		s := New(Config{ProofWait: wait})
		if d := process(t, h, s, t0); d.Kind != DecisionWait {
			t.Fatalf("decision %s %q, want a wait", d.Kind, d.Reason)
		}
		if d := process(t, h, s, t0.Add(wait)); d.Kind != DecisionFail {
			t.Fatalf("at the bound from the first wait: decision %s %q, want a failure", d.Kind, d.Reason)
		}
	})
}

// TestProvedNothingIsNotWaitedFor: a member that proved nothing or lied is not pending:
// the job fails min_nodes at once, as before speed proofs could be pending.
func TestProvedNothingIsNotWaitedFor(t *testing.T) {
	h := &Harness{SelfID: "a", MemberList: unproven(members("a", "b", "c", "d"), "d"),
		JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0}}}
	d := process(t, h, New(Config{ProofWait: time.Hour}), t0)
	if d.Kind != DecisionFail || strings.Contains(d.Reason, "proved") {
		t.Fatalf("decision %s %q, want a min_nodes failure that names no pending proof", d.Kind, d.Reason)
	}
	// Nor is a pending member that is not alive.
	h = &Harness{SelfID: "a", MemberList: with(pending(members("a", "b", "c", "d"), "d"), "d", MemberSuspect),
		JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0}}}
	if d := process(t, h, New(Config{ProofWait: time.Hour}), t0); d.Kind != DecisionFail {
		t.Fatalf("suspect pending member: decision %s %q, want a failure", d.Kind, d.Reason)
	}
}

// TestManyUnprovenFitAStatusMessage: the failure names at most maxNamed unproven
// members, so that its status message stays within the control plane's 1 KiB (a longer
// one would be refused and the job never failed).
func TestManyUnprovenFitAStatusMessage(t *testing.T) {
	var ids []string
	for i := range 40 {
		ids = append(ids, fmt.Sprintf("12D3KooW%044d", i))
	}
	ms := pending(members(ids...), ids[1:]...)
	h := &Harness{SelfID: ids[0], MemberList: ms,
		JobList: []Job{{ID: "j", Spec: fourNodeSpec(), Status: jobspec.JobSubmitted, SubmittedAt: t0}}}
	d := process(t, h, New(Config{ProofWait: time.Second}), t0.Add(time.Second))
	if d.Kind != DecisionFail || len(d.Reason) > 1024 || !strings.Contains(d.Reason, ids[1]) || !strings.HasSuffix(d.Reason, "and 31 more)") {
		t.Fatalf("decision %s, reason of %d bytes %q: want a failure of at most 1 KiB naming %s and 31 more", d.Kind, len(d.Reason), d.Reason, ids[1])
	}
}
