package consensus

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshnode/meshnode/internal/testutil"
)

// caughtUp waits until n has applied everything the leader has committed.
func waitCaughtUp(t *testing.T, leader, n *testNode) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, n.name+" caught up", func() bool {
		return n.c.raft.AppliedIndex() >= leader.c.raft.CommitIndex()
	})
}

func suffrage(t *testing.T, leader *testNode, n *testNode) raft.ServerSuffrage {
	t.Helper()
	servers, err := leader.c.servers(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if string(s.ID) == n.id.String() {
			return s.Suffrage
		}
	}
	t.Fatalf("%s is not in the raft group", n.name)
	return 0
}

// backdate makes the leader's probation clock of n start an hour ago.
func backdate(leader, n *testNode) {
	leader.c.probation.mu.Lock()
	defer leader.c.probation.mu.Unlock()
	leader.c.probation.since[raft.ServerID(n.id.String())] = time.Now().Add(-time.Hour)
}

// TestPromotionWaitsForProbation: a caught-up non-voter with a voter seat free is not
// promoted before its probation (before: at the first autopilot tick after it caught up);
// it cannot approve itself; a voter's operator approval promotes it at once.
func TestPromotionWaitsForProbation(t *testing.T) {
	tc := newMockCluster(t)
	tc.probation = time.Hour
	ctx := ctxT(t)
	n0 := tc.add(true)
	tc.waitMembers(10*time.Second, []*testNode{n0}, nil)
	n1 := tc.add(false)
	tc.waitMembers(10*time.Second, []*testNode{n0}, []*testNode{n1})
	waitCaughtUp(t, n0, n1)
	for range 3 {
		n0.c.autopilotTick()
	}
	if s := suffrage(t, n0, n1); s != raft.Nonvoter {
		t.Fatalf("%s is a %v before its probation", n1.name, s)
	}
	if _, err := n1.c.Promote(ctx, n1.id.String()); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a non-voter approving itself: %v, want ErrForbidden", err)
	}
	if _, err := n1.c.call(ctx, n0.id, "promotion", mustJSON(t, PromotionArgs{ID: n1.id.String(), Decision: PromotionApproved})); !errors.Is(err, ErrForbidden) {
		t.Fatalf("a non-voter's raw promotion request: %v, want ErrForbidden", err)
	}
	res, err := n0.c.Promote(ctx, n1.id.String())
	if err != nil || res.Suffrage != "voter" {
		t.Fatalf("operator promote: %+v %v", res, err)
	}
	tc.waitMembers(5*time.Second, []*testNode{n0, n1}, nil)
}

// TestRefusedNonvoterStaysNonvoter: a non-voter that an operator refused is not promoted
// even after its probation with a seat free (the refusal is replicated: it is made through
// a follower voter); a later approval promotes it; promote and refuse of a voter or of an
// unknown node are refused with a message.
func TestRefusedNonvoterStaysNonvoter(t *testing.T) {
	tc := newMockCluster(t)
	tc.probation = time.Hour
	ctx := ctxT(t)
	n0 := tc.add(true)
	tc.waitMembers(10*time.Second, []*testNode{n0}, nil)
	n1 := tc.add(false)
	tc.waitMembers(10*time.Second, []*testNode{n0}, []*testNode{n1})
	if _, err := n0.c.Promote(ctx, n1.id.String()); err != nil {
		t.Fatal(err)
	}
	n2 := tc.add(false)
	tc.waitMembers(10*time.Second, []*testNode{n0, n1}, []*testNode{n2})
	waitCaughtUp(t, n0, n2)
	testutil.WaitFor(t, 5*time.Second, "n1 knows it is a voter", func() bool { return n1.c.isVoter(n1.id) })
	if res, err := n1.c.Refuse(ctx, n2.id.String()); err != nil || res.Decision != PromotionRefused {
		t.Fatalf("refuse through a follower voter: %+v %v", res, err)
	}
	n0.c.autopilotTick() // starts n2's probation clock
	backdate(n0, n2)
	n0.c.autopilotTick()
	if s := suffrage(t, n0, n2); s != raft.Nonvoter {
		t.Fatalf("refused %s became a %v", n2.name, s)
	}
	if _, err := n0.c.Refuse(ctx, n1.id.String()); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("refuse a voter: %v, want ErrBadRequest", err)
	}
	if _, err := n0.c.Promote(ctx, "12D3KooWNotAPeer"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("promote a malformed id: %v, want ErrBadRequest", err)
	}
	if res, err := n1.c.Promote(ctx, n2.id.String()); err != nil || res.Suffrage != "voter" {
		t.Fatalf("promote after refuse: %+v %v", res, err)
	}
	tc.waitMembers(5*time.Second, []*testNode{n0, n1, n2}, nil)
}

// TestProbationServedPromotes: once its probation is served, a caught-up non-voter is
// promoted automatically into a free seat.
func TestProbationServedPromotes(t *testing.T) {
	tc := newMockCluster(t)
	tc.probation = time.Hour
	n0 := tc.add(true)
	tc.waitMembers(10*time.Second, []*testNode{n0}, nil)
	n1 := tc.add(false)
	tc.waitMembers(10*time.Second, []*testNode{n0}, []*testNode{n1})
	waitCaughtUp(t, n0, n1)
	n0.c.autopilotTick()
	backdate(n0, n1)
	n0.c.autopilotTick()
	tc.waitMembers(5*time.Second, []*testNode{n0, n1}, nil)
}
