package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshnode/meshnode/internal/testutil"
)

// partition cuts n off from every other running node (mocknet only).
func (tc *testCluster) partition(n *testNode) {
	tc.t.Helper()
	for _, o := range tc.running() {
		if o == n {
			continue
		}
		if err := tc.mn.UnlinkPeers(n.id, o.id); err != nil {
			tc.t.Fatal(err)
		}
		_ = tc.mn.DisconnectPeers(n.id, o.id)
	}
}

// heal reconnects n to every other running node.
func (tc *testCluster) heal(n *testNode) {
	tc.t.Helper()
	for _, o := range tc.running() {
		if o != n {
			tc.connectHosts(n.h, o.h)
		}
	}
}

// TestStaleNodeFollowsAPromotedLeader: a non-voter cut off while another non-voter was
// promoted and became leader comes back with a configuration in which the new leader is
// a non-voter, so its raft gate refuses the leader's AppendEntries. It announces itself
// again, trusts the voters the leader names, and catches up.
func TestStaleNodeFollowsAPromotedLeader(t *testing.T) {
	tc := newMockCluster(t)
	tc.probation = time.Hour
	ctx := ctxT(t)
	n0 := tc.add(true)
	tc.waitMembers(10*time.Second, []*testNode{n0}, nil)
	n1, n2 := tc.add(false), tc.add(false)
	tc.waitMembers(10*time.Second, []*testNode{n0}, []*testNode{n1, n2})
	waitCaughtUp(t, n0, n2)
	tc.partition(n2)
	if _, err := n0.c.Promote(ctx, n1.id.String()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 5*time.Second, "n1 knows it is a voter", func() bool { return n1.c.isVoter(n1.id) })
	if err := n0.c.futureErr(ctx, n0.c.raft.LeadershipTransferToServer(raft.ServerID(n1.id.String()), raft.ServerAddress(n1.id.String()))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "n1 leads", n1.c.IsLeader)
	id, err := n1.c.SubmitJob(ctx, namedSpec("after-partition"))
	if err != nil {
		t.Fatal(err)
	}
	if n2.c.isVoter(n1.id) {
		t.Fatal("n2 already knows n1 as a voter: the test does not stage a stale configuration")
	}
	n2.c.trusted.mu.Lock() // a minute has passed since n2 joined: its trust in the peers it joined through has expired
	clear(n2.c.trusted.until)
	n2.c.trusted.mu.Unlock()
	tc.heal(n2)
	testutil.WaitForErr(t, 20*time.Second, func() error {
		if _, _, err := n2.c.FSM().Job(id); err != nil {
			return fmt.Errorf("n2 has not caught up: %w", err)
		}
		return nil
	})
}

// TestCutOffFollowerRefusesAtOnce: a voter cut off from the other two refuses a submit
// with ErrNoLeader once it has heard from no leader for cutOffAfter election timeouts,
// instead of retrying until the caller's context ends (the minority's refusal in
// testnet's TestControlPlanePartition); after healing it submits again.
func TestCutOffFollowerRefusesAtOnce(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	n0 := tc.add(true)
	tc.waitMembers(10*time.Second, []*testNode{n0}, nil)
	n1, n2 := tc.add(false), tc.add(false)
	tc.waitMembers(20*time.Second, []*testNode{n0, n1, n2}, nil)
	leader := tc.waitLeader(10 * time.Second)
	var f *testNode
	for _, n := range []*testNode{n0, n1, n2} {
		if n != leader {
			f = n
		}
	}
	waitCaughtUp(t, leader, f)
	tc.partition(f)
	sub, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := f.c.SubmitJob(sub, namedSpec("from-the-minority"))
	if !errors.Is(err, ErrNoLeader) || !strings.Contains(err.Error(), "no contact with a leader") || sub.Err() != nil {
		t.Fatalf("submit through a cut-off follower: %v (context: %v), want an early ErrNoLeader", err, sub.Err())
	}
	t.Logf("refused: %v", err)
	tc.heal(f)
	testutil.WaitForErr(t, 20*time.Second, func() error {
		_, err := f.c.SubmitJob(ctx, namedSpec("after-healing"))
		return err
	})
}
