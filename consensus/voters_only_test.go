package consensus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// These tests perform issue 25's attack on the control plane by a joined member: a
// non-voter that sends raft RPCs. docs/security.md names each one.

// joinedNonvoter is an admitted peer that joined the raft group as itself (so it is a
// non-voter of every voter's configuration) and runs a raft transport of its own that
// admits anything: the attacker.
func joinedNonvoter(t *testing.T, tc *testCluster, voters []*testNode) (host.Host, *raft.NetworkTransport) {
	t.Helper()
	out := tc.outsider()
	leader := tc.waitLeader(5 * time.Second)
	resp := rawRPC(ctxT(t), t, out, leader.id, "", "join", JoinArgs{Node: Node{ID: out.ID().String()}})
	if resp.Code != "" {
		t.Fatalf("join as itself answered %+v", resp)
	}
	attacker := &testNode{name: "attacker", id: out.ID()}
	tc.waitMembers(10*time.Second, voters, []*testNode{attacker})
	for _, n := range voters { // every voter has appended the configuration that names it
		testutil.WaitForErr(t, 10*time.Second, func() error {
			if !n.c.isMember(out.ID()) {
				return fmt.Errorf("%s does not list the attacker yet", n.name)
			}
			return nil
		})
	}
	layer := NewStreamLayer(out, openGate{cluster: leader.c.ClusterID()}, 2*time.Second, nil)
	trans := raft.NewNetworkTransport(layer, 1, 2*time.Second, io.Discard)
	t.Cleanup(func() { _ = trans.Close() })
	return out, trans
}

// forgedAppend is AppendEntries from the attacker at term, continuing target's log with a
// job submission and a plan that names only the attacker.
func forgedAppend(t *testing.T, from peer.ID, target *testNode, term uint64, job string) *raft.AppendEntriesRequest {
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(from.String()), Addr: []byte(from.String())}
	last := target.c.raft.LastIndex()
	plan := json.RawMessage(fmt.Sprintf(`{"replicas":[[{"node":%q,"first":0,"last":6}]]}`, from))
	entries := []*raft.Log{
		{Index: last + 1, Term: term, Type: raft.LogCommand,
			Data: mustEncode(t, JobSubmitType, JobSubmitRequest{ID: job, Spec: jobspec.DefaultSpec(), Time: t0})},
		{Index: last + 2, Term: term, Type: raft.LogCommand,
			Data: mustEncode(t, PlanSetType, PlanSetRequest{JobID: job, Epoch: 1, Plan: plan, Time: t0})},
	}
	return &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term, PrevLogEntry: last,
		PrevLogTerm: target.c.raft.CurrentTerm(), Entries: entries, LeaderCommitIndex: last + 2}
}

// TestNonVoterRaftRefused: a joined non-voter sends AppendEntries with term+1000 carrying a
// job submission and a plan naming only itself, RequestVote (before:
// every voter answered success and applied the entries; the re-elected leader kept the
// forged plan), and RequestPreVote, InstallSnapshot of an empty state and TimeoutNow. Every
// voter refuses each with ErrNotVoter; terms, logs and FSMs do not change.
func TestNonVoterRaftRefused(t *testing.T) {
	tc := newMockCluster(t)
	leader, a, b := threeVoters(t, tc)
	voters := []*testNode{leader, a, b}
	out, trans := joinedNonvoter(t, tc, voters)
	// The voters may still be catching up on the join's configuration entry: a log that
	// grows legitimately during the attack would look like an accepted forgery.
	testutil.WaitForErr(t, 10*time.Second, func() error {
		want := leader.c.raft.LastIndex()
		for _, n := range voters {
			if got, applied := n.c.raft.LastIndex(), n.c.raft.AppliedIndex(); got != want || applied < want {
				return fmt.Errorf("%s at index %d (applied %d), the leader at %d", n.name, got, applied, want)
			}
		}
		return nil
	})
	term := leader.c.raft.CurrentTerm()
	before := map[string]uint64{}
	for _, n := range voters {
		before[n.name] = n.c.raft.LastIndex()
	}
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(out.ID().String()), Addr: []byte(out.ID().String())}
	for _, n := range voters {
		id, addr := raft.ServerID(n.id.String()), raft.ServerAddress(n.id.String())
		var aeResp raft.AppendEntriesResponse
		if err := trans.AppendEntries(id, addr, forgedAppend(t, out.ID(), n, term+1000, "forged"), &aeResp); !errors.Is(err, ErrNotVoter) {
			t.Fatalf("non-voter AppendEntries to %s: err %v, response %+v; want a refusal wrapping ErrNotVoter", n.name, err, aeResp)
		}
		var rvResp raft.RequestVoteResponse
		rv := &raft.RequestVoteRequest{RPCHeader: hdr, Term: term + 1000, LastLogIndex: 1 << 40, LastLogTerm: term + 1000}
		if err := trans.RequestVote(id, addr, rv, &rvResp); !errors.Is(err, ErrNotVoter) {
			t.Fatalf("non-voter RequestVote to %s: err %v, response %+v", n.name, err, rvResp)
		}
		var pvResp raft.RequestPreVoteResponse
		pv := &raft.RequestPreVoteRequest{RPCHeader: hdr, Term: term + 1000, LastLogIndex: 1 << 40, LastLogTerm: term + 1000}
		if err := trans.RequestPreVote(id, addr, pv, &pvResp); !errors.Is(err, ErrNotVoter) {
			t.Fatalf("non-voter RequestPreVote to %s: err %v, response %+v", n.name, err, pvResp)
		}
		snap := []byte(`{"index":1,"nodes":{},"jobs":{}}`) // an empty state: every job gone
		is := &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax, Term: term + 1000,
			LastLogIndex: 1 << 40, LastLogTerm: term + 1000, Size: int64(len(snap))}
		var isResp raft.InstallSnapshotResponse
		if err := trans.InstallSnapshot(id, addr, is, &isResp, bytes.NewReader(snap)); !errors.Is(err, ErrNotVoter) {
			t.Fatalf("non-voter InstallSnapshot to %s: err %v, response %+v", n.name, err, isResp)
		}
		var tnResp raft.TimeoutNowResponse
		if err := trans.TimeoutNow(id, addr, &raft.TimeoutNowRequest{RPCHeader: hdr}, &tnResp); !errors.Is(err, ErrNotVoter) {
			t.Fatalf("non-voter TimeoutNow to %s: err %v", n.name, err)
		}
	}
	for _, n := range voters {
		if got := n.c.raft.CurrentTerm(); got != term {
			t.Errorf("%s: term %d → %d", n.name, term, got)
		}
		if got := n.c.raft.LastIndex(); got != before[n.name] {
			t.Errorf("%s: last log index %d → %d", n.name, before[n.name], got)
		}
		if _, _, err := n.c.FSM().Job("forged"); err == nil {
			t.Errorf("%s applied the forged job", n.name)
		}
	}
	if !leader.c.IsLeader() {
		t.Fatal("the leader stepped down")
	}
}

// TestNonVoterFloodKeepsALeader: the same forged AppendEntries and RequestVote, with a term
// a thousand above the highest seen, sent every 100 ms to every voter (before: the cluster
// stayed leaderless and submits failed). Submits through a voter keep succeeding and the
// leader keeps its term.
func TestNonVoterFloodKeepsALeader(t *testing.T) {
	tc := newMockCluster(t)
	leader, a, b := threeVoters(t, tc)
	voters := []*testNode{leader, a, b}
	out, trans := joinedNonvoter(t, tc, voters)
	term := leader.c.raft.CurrentTerm()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var refused, sent atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			for _, n := range voters {
				if !n.running() {
					continue
				}
				top := n.c.raft.CurrentTerm() + 1000
				var resp raft.AppendEntriesResponse
				err := trans.AppendEntries(raft.ServerID(n.id.String()), raft.ServerAddress(n.id.String()), forgedAppend(t, out.ID(), n, top, "flood"), &resp)
				sent.Add(1)
				if errors.Is(err, ErrNotVoter) {
					refused.Add(1)
				}
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	}()
	for i := range 5 {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := a.c.SubmitJob(sctx, namedSpec(fmt.Sprintf("under-flood-%d", i)))
		scancel()
		if err != nil {
			cancel()
			wg.Wait()
			t.Fatalf("submit %d under the flood: %v", i, err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the flood sent 3 rounds", func() bool { return sent.Load() >= 9 })
	cancel()
	wg.Wait()
	if refused.Load() != sent.Load() {
		t.Errorf("%d of %d forged AppendEntries refused", refused.Load(), sent.Load())
	}
	for _, n := range voters {
		if got := n.c.raft.CurrentTerm(); got != term {
			t.Errorf("%s: term %d → %d under the flood", n.name, term, got)
		}
		if _, _, err := n.c.FSM().Job("flood"); err == nil {
			t.Errorf("%s applied the flood's job", n.name)
		}
	}
}

// toggleGate admits while open is set.
type toggleGate struct{ open atomic.Bool }

func (g *toggleGate) ClusterID() string { return "" }
func (g *toggleGate) Admit(p peer.ID, _ string) error {
	if g.open.Load() {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNotVoter, p)
}

// TestStreamReadsAreAdmittedAgain: a raft stream accepted while its peer was a voter
// stops delivering bytes once the peer is no longer admitted (a voter removed keeps no
// open stream to send raft RPCs on).
func TestStreamReadsAreAdmittedAgain(t *testing.T) {
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	acceptor, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	dialer, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	gate := &toggleGate{}
	gate.open.Store(true)
	in := NewStreamLayer(acceptor, gate, 2*time.Second, nil)
	t.Cleanup(func() { _ = in.Close() })
	outLayer := NewStreamLayer(dialer, openGate{}, 2*time.Second, nil)
	t.Cleanup(func() { _ = outLayer.Close() })
	conn, err := outLayer.Dial(raft.ServerAddress(acceptor.ID().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	srv, err := in.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	buf := make([]byte, 1)
	if _, err := conn.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(srv, buf); err != nil || buf[0] != 'a' {
		t.Fatalf("admitted read: %q %v", buf, err)
	}
	gate.open.Store(false)
	if _, err := conn.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if n, err := io.ReadFull(srv, buf); !errors.Is(err, ErrNotVoter) {
		t.Fatalf("read after the peer lost its vote: %d bytes %q, err %v; want ErrNotVoter", n, buf[:n], err)
	}
}
