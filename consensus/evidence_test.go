package consensus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestEvidenceIsJudgedByTheLeader: a plan node ships evidence against another plan node;
// the leader judges it with its own judge and commits the verdict stamped as its own,
// convicting or naming the false accuser. A node outside the plan, evidence against a
// node outside it or against the reporter itself, an oversized message and a second one
// within EvidenceInterval are refused.
func TestEvidenceIsJudgedByTheLeader(t *testing.T) {
	tc := newMockCluster(t)
	tc.steady = true // the judge is the leader's: a CI run under -race lost it to a step-down
	ctx := ctxT(t)
	leader, a, b := threeVoters(t, tc)
	id := runningOn(t, ctx, a, leader, "evidence")
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("guilty")); !errors.Is(err, ErrForbidden) {
		t.Fatalf("evidence to a leader without a judge: %v, want ErrForbidden", err)
	}
	var mu sync.Mutex
	var judged []string
	leader.c.SetEvidenceJudge(func(_ context.Context, j Job, reporter, member string, ev []byte) (bool, string, error) {
		mu.Lock()
		judged = append(judged, string(ev))
		mu.Unlock()
		if string(ev) == "malformed" {
			return false, "", errors.New("does not decode")
		}
		return string(ev) == "guilty", "the leader's judge says " + string(ev), nil
	})
	for name, c := range map[string]struct {
		from   *testNode
		member string
		want   error
	}{
		"from outside the plan": {b, leader.id.String(), ErrForbidden},
		"against a non-member":  {a, b.id.String(), ErrForbidden},
		"against the reporter":  {a, a.id.String(), ErrForbidden},
		"unknown job":           {a, leader.id.String(), ErrJobNotFound},
	} {
		job := id
		if name == "unknown job" {
			job = "nope"
		}
		if err := c.from.c.ShipEvidence(ctx, job, c.member, []byte("guilty")); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), make([]byte, MaxEvidenceBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized evidence: %v", err)
	}
	mu.Lock()
	if len(judged) != 0 {
		t.Fatalf("refused evidence was judged: %v", judged)
	}
	mu.Unlock()
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("innocent")); err != nil {
		t.Fatal(err)
	}
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("guilty")); !errors.Is(err, ErrBusy) {
		t.Fatalf("a second evidence at once: %v, want ErrBusy", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the verdict on a follower", func() bool {
		j, _, err := b.c.FSM().Job(id)
		return err == nil && len(j.Verdicts) == 1
	})
	j, _, _ := b.c.FSM().Job(id)
	v := j.Verdicts[0]
	if v.Convicted || v.Accuser != a.id.String() || v.Member != leader.id.String() || v.By != leader.id.String() || v.Reason != "the leader's judge says innocent" {
		t.Fatalf("verdict %+v: want the leader's, not convicting, naming %s the accuser", v, a.id)
	}
	leader.c.evidence.mu.Lock()
	clear(leader.c.evidence.last) // past EvidenceInterval, without waiting for it
	leader.c.evidence.mu.Unlock()
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("guilty")); err != nil {
		t.Fatal(err)
	}
	j, _, _ = leader.c.FSM().Job(id)
	if len(j.Verdicts) != 2 || !j.Verdicts[1].Convicted {
		t.Fatalf("verdicts %+v: want the second convicting", j.Verdicts)
	}
	leader.c.evidence.mu.Lock()
	clear(leader.c.evidence.last)
	leader.c.evidence.mu.Unlock()
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), make([]byte, MaxEvidenceBytes)); err != nil {
		t.Fatalf("evidence of MaxEvidenceBytes does not fit the RPC: %v", err)
	}
	// The job is replanned onto the leader alone (as a first conviction replans it): a
	// still ships evidence of the epoch both shared, against a member of that plan; the
	// judge holds it to that epoch's plan. b, in no plan of the job, is still refused.
	alone := []byte(fmt.Sprintf(`{"replicas":[[{"node":%q,"first":0,"last":6}]]}`, leader.id))
	if _, err := leader.c.SetPlan(ctx, id, alone, "without a"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the judge done", func() bool {
		leader.c.evidence.mu.Lock()
		defer leader.c.evidence.mu.Unlock()
		clear(leader.c.evidence.last)
		return len(leader.c.evidence.busy) == 0
	})
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("guilty")); err != nil {
		t.Errorf("evidence from a node of an earlier plan against a node of it: %v, want it judged", err)
	}
	if err := b.c.ShipEvidence(ctx, id, leader.id.String(), []byte("guilty")); !errors.Is(err, ErrForbidden) {
		t.Errorf("evidence from a node of no plan of the job: %v, want ErrForbidden", err)
	}
}

// runningOn submits a job named name through a and has leader plan it on a and itself (one
// replica each) and mark it running; it returns the job's ID.
func runningOn(t *testing.T, ctx context.Context, a, leader *testNode, name string) string {
	t.Helper()
	id, err := a.c.SubmitJob(ctx, namedSpec(name))
	if err != nil {
		t.Fatal(err)
	}
	plan := []byte(fmt.Sprintf(`{"replicas":[[{"node":%q,"first":0,"last":6}],[{"node":%q,"first":0,"last":6}]]}`, a.id, leader.id))
	if err := leader.c.SetJobStatus(ctx, id, JobPlanning, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.c.SetPlan(ctx, id, plan, "initial"); err != nil {
		t.Fatal(err)
	}
	if err := leader.c.SetJobStatus(ctx, id, JobRunning, ""); err != nil {
		t.Fatal(err)
	}
	return id
}
