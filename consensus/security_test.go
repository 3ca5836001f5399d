package consensus

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// These tests perform the attacks of issue 14 on the control plane against the real code
// paths (raft transport, RPC server, FSM) and check that each now fails while the honest
// path keeps working. docs/security.md names each one.

// outsider starts a host that the mesh admitted (it is connected to every running node)
// but that is not a member of the raft group.
func (tc *testCluster) outsider() host.Host {
	tc.t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tc.t.Fatal(err)
	}
	h, err := tc.newHost(key)
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { _ = h.Close() })
	for _, n := range tc.running() {
		tc.connectHosts(h, n.h)
	}
	return h
}

// openGate admits every stream and claims cluster: the attacker's side of a handshake.
type openGate struct{ cluster string }

func (g openGate) ClusterID() string           { return g.cluster }
func (g openGate) Admit(peer.ID, string) error { return nil }

// rawRPC sends one request from h to target on ProtocolRPC, as any peer could.
func rawRPC(ctx context.Context, t *testing.T, h host.Host, target peer.ID, cluster, op string, args any) rpcResponse {
	t.Helper()
	body, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := encodeRequest(rpcRequest{Op: op, Cluster: cluster, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.NewStream(ctx, target, ProtocolRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	if err := writeFrame(s, payload, MaxRPCRequestBytes); err != nil {
		t.Fatal(err)
	}
	out, err := readFrame(s, MaxRPCResponseBytes)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	var resp rpcResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

func threeVoters(t *testing.T, tc *testCluster) (leader, a, b *testNode) {
	n0, n1, n2 := tc.add(true), tc.add(false), tc.add(false)
	tc.waitMembers(15*time.Second, []*testNode{n0, n1, n2}, nil)
	return tc.waitLeader(5 * time.Second), n1, n2
}

// TestNonMemberRaftRefused: an admitted peer outside the raft configuration sends
// AppendEntries and RequestVote with a higher term (before: the leader stepped down and
// appended the entries). Both are refused at the handshake; the leader keeps its term.
func TestNonMemberRaftRefused(t *testing.T) {
	tc := newMockCluster(t)
	leader, _, _ := threeVoters(t, tc)
	term := leader.c.raft.CurrentTerm()
	out := tc.outsider()
	// The cluster ID is not a secret: the attacker presents the right one.
	layer := NewStreamLayer(out, openGate{cluster: leader.c.ClusterID()}, 2*time.Second, nil)
	trans := raft.NewNetworkTransport(layer, 1, 2*time.Second, io.Discard)
	t.Cleanup(func() { _ = trans.Close() })
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(out.ID().String()), Addr: []byte(out.ID().String())}
	entry := &raft.Log{Index: leader.c.raft.LastIndex() + 1, Term: term + 10, Type: raft.LogCommand,
		Data: mustEncode(t, JobSubmitType, JobSubmitRequest{ID: "evil", Spec: jobspec.DefaultSpec(), Time: t0})}
	ae := &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term + 10, PrevLogEntry: leader.c.raft.LastIndex(),
		PrevLogTerm: term, Entries: []*raft.Log{entry}, LeaderCommitIndex: entry.Index}
	var aeResp raft.AppendEntriesResponse
	err := trans.AppendEntries(raft.ServerID(leader.id.String()), raft.ServerAddress(leader.id.String()), ae, &aeResp)
	if !errors.Is(err, ErrNotMember) {
		t.Fatalf("non-member AppendEntries: err %v, response %+v; want a refusal wrapping ErrNotMember", err, aeResp)
	}
	rv := &raft.RequestVoteRequest{RPCHeader: hdr, Term: term + 20, LastLogIndex: 1 << 40, LastLogTerm: term + 20}
	var rvResp raft.RequestVoteResponse
	if err := trans.RequestVote(raft.ServerID(leader.id.String()), raft.ServerAddress(leader.id.String()), rv, &rvResp); !errors.Is(err, ErrNotMember) {
		t.Fatalf("non-member RequestVote: err %v, response %+v", err, rvResp)
	}
	if !leader.c.IsLeader() || leader.c.raft.CurrentTerm() != term {
		t.Fatalf("leader disturbed: leader=%v term %d → %d", leader.c.IsLeader(), term, leader.c.raft.CurrentTerm())
	}
	if _, _, err := leader.c.FSM().Job("evil"); err == nil {
		t.Fatal("the outsider's entry was applied")
	}
	// A non-member's member-only RPC is refused too; the honest path still works.
	resp := rawRPC(ctxT(t), t, out, leader.id, leader.c.ClusterID(), "submit", SubmitArgs{Spec: jobspec.DefaultSpec()})
	if resp.Code != "not_member" {
		t.Fatalf("non-member submit answered %+v", resp)
	}
	if _, err := tc.nodes[1].c.SubmitJob(ctxT(t), namedSpec("honest")); err != nil {
		t.Fatalf("member submit: %v", err)
	}
}

// TestJoinAndLeaveOnlyAsSelf: join and leave by proxy are refused (before: any admitted
// peer could add fake voters or evict real ones); a peer joining as itself becomes a
// non-voter that is never promoted while it does not replicate, even with a voter seat
// free, while a real node that joins is promoted once caught up.
func TestJoinAndLeaveOnlyAsSelf(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	n0 := tc.add(true)
	tc.waitMembers(10*time.Second, []*testNode{n0}, nil)
	out := tc.outsider()
	fakeKey, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	fake, _ := peer.IDFromPrivateKey(fakeKey)

	resp := rawRPC(ctx, t, out, n0.id, "", "join", JoinArgs{Node: Node{ID: fake.String()}})
	if resp.Code != "forbidden" {
		t.Fatalf("join by proxy answered %+v", resp)
	}
	// Joining as itself is allowed: it becomes a non-voter.
	resp = rawRPC(ctx, t, out, n0.id, "", "join", JoinArgs{Node: Node{ID: out.ID().String()}})
	if resp.Code != "" {
		t.Fatalf("join as itself answered %+v", resp)
	}
	var jr JoinResult
	if err := json.Unmarshal(resp.Body, &jr); err != nil || jr.ClusterID != n0.c.ClusterID() {
		t.Fatalf("join result %s (%v), want cluster %s", resp.Body, err, n0.c.ClusterID())
	}
	n1 := tc.add(false)
	// n1 replicates and is promoted; the outsider, which runs no raft, stays a non-voter
	// although the third voter seat is free.
	outNode := &testNode{name: "outsider", id: out.ID()}
	tc.waitMembers(15*time.Second, []*testNode{n0, n1}, []*testNode{outNode})

	// A member asks the leader to remove another member: refused.
	if _, err := n1.c.call(ctx, n0.id, "leave", mustJSON(t, LeaveArgs{ID: n0.id.String()})); !errors.Is(err, ErrForbidden) {
		t.Fatalf("leave by proxy: %v, want ErrForbidden", err)
	}
	if _, err := n1.c.call(ctx, n0.id, "join", mustJSON(t, JoinArgs{Node: Node{ID: fake.String()}})); !errors.Is(err, ErrForbidden) {
		t.Fatalf("member join by proxy: %v, want ErrForbidden", err)
	}
	tc.waitMembers(5*time.Second, []*testNode{n0, n1}, []*testNode{outNode})
	if _, ok := n0.c.FSM().Node(fake.String()); ok {
		t.Fatal("the fake node was recorded")
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPerOpAuthorization: only the leader plans and moves jobs to planning/running; only
// a node of a job's current plan reports its progress, checkpoints (held by plan nodes),
// events and end; nothing is reported for a finished job; arguments with unknown fields
// are refused. Before, any admitted peer could do all of it on any job.
func TestPerOpAuthorization(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, a, b := threeVoters(t, tc)
	id, err := b.c.SubmitJob(ctx, namedSpec("authz"))
	if err != nil {
		t.Fatal(err)
	}
	plan := []byte(fmt.Sprintf(`{"replicas":[[{"node":%q,"first":0,"last":6}]]}`, a.id))
	if _, err := b.c.SetPlan(ctx, id, plan, "b plans"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("follower set_plan: %v", err)
	}
	if err := b.c.SetJobStatus(ctx, id, JobPlanning, ""); !errors.Is(err, ErrForbidden) {
		t.Fatalf("follower moves job to planning: %v", err)
	}
	if err := leader.c.SetJobStatus(ctx, id, JobPlanning, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.c.SetPlan(ctx, id, plan, "initial"); err != nil {
		t.Fatal(err)
	}
	if err := leader.c.SetJobStatus(ctx, id, JobRunning, ""); err != nil {
		t.Fatal(err)
	}
	ownFile := CheckpointFile{Node: a.id.String(), Layers: [2]int{0, 5}, Hash: "h1", Bytes: 1}
	otherFile := CheckpointFile{Node: b.id.String(), Layers: [2]int{0, 5}, Hash: "h1", Bytes: 1}
	sample := []ProgressSample{{Step: 1, Loss: 2}}
	// b is a member but not in the plan: every report is refused.
	for name, err := range map[string]error{
		"progress":   b.c.ReportProgress(ctx, id, sample),
		"checkpoint": b.c.AddCheckpoint(ctx, id, CheckpointManifest{Step: 1, Files: []CheckpointFile{otherFile}}),
		"event":      b.c.AddEvent(ctx, id, Event{Kind: "x"}),
		"done":       b.c.SetJobStatus(ctx, id, JobDone, "b says so"),
	} {
		if !errors.Is(err, ErrForbidden) {
			t.Errorf("%s from a node outside the plan: %v, want ErrForbidden", name, err)
		}
	}
	// a is in the plan: its reports go through, for files held by plan nodes only.
	if err := a.c.ReportProgress(ctx, id, sample); err != nil {
		t.Fatal(err)
	}
	for range 5 { // the same file reported again is not listed again
		if err := a.c.AddCheckpoint(ctx, id, CheckpointManifest{Step: 1, Files: []CheckpointFile{ownFile}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.c.AddCheckpoint(ctx, id, CheckpointManifest{Step: 1, Files: []CheckpointFile{otherFile}}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("checkpoint naming a holder outside the plan: %v", err)
	}
	if err := a.c.SetJobStatus(ctx, id, JobPlanning, ""); !errors.Is(err, ErrForbidden) {
		t.Fatalf("plan node moves job to planning: %v", err)
	}
	// An event names the member that recorded it as the leader authenticated it, whatever
	// the sender wrote: the scheduler counts distinct reporters of an offender.
	if err := a.c.AddEvent(ctx, id, Event{Kind: "offender", Message: "x", By: b.id.String()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForErr(t, 5*time.Second, func() error {
		j, _, err := a.c.FSM().Job(id)
		if err != nil {
			return err
		}
		for _, ev := range j.Events {
			if ev.Kind == "offender" {
				if ev.By != a.id.String() {
					t.Fatalf("event recorded by %s names %q as its reporter", a.id, ev.By)
				}
				return nil
			}
		}
		return errors.New("the event is not applied yet")
	})
	// Phase times are recorded as the reporting member's own, whatever node they name.
	if err := a.c.ReportProgressTimes(ctx, id, nil, []StageTimes{{Epoch: 1, Node: b.id.String(), Steps: 2, Compute: 0.5}}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForErr(t, 5*time.Second, func() error {
		j, _, err := a.c.FSM().Job(id)
		if err != nil {
			return err
		}
		if n := len(j.StageTimes); n == 0 {
			return errors.New("the phase times are not applied yet")
		} else if j.StageTimes[n-1].Node != a.id.String() {
			t.Fatalf("phase times reported by %s name %q", a.id, j.StageTimes[n-1].Node)
		}
		return nil
	})
	if _, err := a.c.call(ctx, leader.id, "event", []byte(`{"job_id":"`+id+`","event":{"kind":"x"},"bogus":1}`)); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("unknown field: %v, want ErrBadRequest", err)
	}
	if err := a.c.SetJobStatus(ctx, id, JobDone, "finished"); err != nil {
		t.Fatal(err)
	}
	if err := a.c.AddEvent(ctx, id, Event{Kind: "late"}); !errors.Is(err, ErrJobFinished) {
		t.Fatalf("event on a finished job: %v, want ErrJobFinished", err)
	}
	j, _, err := leader.c.Job(ctx, id, true)
	if err != nil || len(j.Checkpoints) != 1 || len(j.Checkpoints[0].Files) != 1 {
		t.Fatalf("checkpoints %+v, %v", j.Checkpoints, err)
	}
	// Any member may cancel (users cancel through any node's local API).
	id2, err := a.c.SubmitJob(ctx, namedSpec("cancel-me"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.c.CancelJob(ctx, id2); err != nil {
		t.Fatalf("member cancel: %v", err)
	}
}

// logCapture records every log line of level Warn and above.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Write(p)
}

func (c *logCapture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// teeHandler sends every record to two handlers.
type teeHandler struct{ a, b slog.Handler }

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.a.Enabled(ctx, l) || h.b.Enabled(ctx, l)
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	return errors.Join(h.a.Handle(ctx, r.Clone()), h.b.Handle(ctx, r.Clone()))
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.a.WithAttrs(as), h.b.WithAttrs(as)}
}

func (h teeHandler) WithGroup(n string) slog.Handler {
	return teeHandler{h.a.WithGroup(n), h.b.WithGroup(n)}
}

// TestForeignClusterRefused: two independently bootstrapped clusters on one network (what
// mDNS does on a LAN) stay apart. A node of one cannot join the other, the other's leader
// does not add it from the mesh's view, and even an explicit attempt to add it fails at the
// raft handshake with a clear log on both sides. Before, they merged silently.
func TestForeignClusterRefused(t *testing.T) {
	tc := newMockCluster(t)
	var logs logCapture
	tc.log = slog.New(teeHandler{tc.log.Handler(), slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})})
	ctx := ctxT(t)
	a := tc.add(true)
	b := tc.add(true) // connected to a, bootstraps its own cluster
	testutil.WaitForErr(t, 10*time.Second, func() error {
		if !a.c.IsLeader() || !b.c.IsLeader() || a.c.FSM().ClusterID() == "" || b.c.FSM().ClusterID() == "" {
			return errors.New("both clusters not up yet")
		}
		return nil
	})
	if a.c.ClusterID() == b.c.ClusterID() {
		t.Fatal("two bootstraps share a cluster id")
	}
	idB, err := b.c.SubmitJob(ctx, namedSpec("in-b"))
	if err != nil {
		t.Fatal(err)
	}
	// The mesh shows each node to the other's leader: neither adds it.
	members := []Member{{ID: a.id, Live: true}, {ID: b.id, Live: true}}
	for _, n := range []*testNode{a, b} {
		if err := n.c.Reconcile(ctx, members); err != nil {
			t.Fatal(err)
		}
	}
	// b asks a's leader to join: refused as foreign.
	if _, err := b.c.call(ctx, a.id, "join", mustJSON(t, JoinArgs{})); !errors.Is(err, ErrForeignCluster) {
		t.Fatalf("join into a foreign cluster: %v", err)
	}
	// a's leader is made to add b anyway: b refuses its raft streams.
	if err := a.c.futureErr(ctx, a.c.raft.AddNonvoter(raft.ServerID(b.id.String()), raft.ServerAddress(b.id.String()), 0, time.Second)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForErr(t, 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "refused raft stream") || !strings.Contains(logs.String(), "foreign cluster") {
			return errors.New("no refusal logged yet")
		}
		return nil
	})
	if !b.c.IsLeader() || b.c.ClusterID() == a.c.ClusterID() {
		t.Fatal("b lost its cluster")
	}
	if _, _, err := b.c.Job(ctx, idB, false); err != nil {
		t.Fatalf("b's job: %v", err)
	}
	if jobs, _ := a.c.FSM().Jobs(); len(jobs) != 0 {
		t.Fatalf("b's jobs reached a: %+v", jobs)
	}
	t.Logf("refusal as logged:\n%s", firstLine(logs.String(), "foreign cluster"))
}

func firstLine(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return l
		}
	}
	return ""
}

// TestSubmitRefusesHugeModel: model.layers 1e10 (which once made the leader allocate
// 720 GB and die) and MaxInt64 sizes are refused at submit, also when a member skips its
// own validation and sends the spec straight to the leader; the leader stays up.
func TestSubmitRefusesHugeModel(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, a, _ := threeVoters(t, tc)
	huge := namedSpec("huge")
	huge.Model.Layers = 1e10
	if _, err := a.c.SubmitJob(ctx, huge); !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "model.layers") {
		t.Fatalf("submit layers 1e10: %v", err)
	}
	wide := namedSpec("wide")
	wide.Model.DModel, wide.Model.Heads = 1<<62, 1
	for _, s := range []jobspec.Spec{huge, wide} {
		_, err := a.c.call(ctx, leader.id, "submit", mustJSON(t, SubmitArgs{Spec: s}))
		if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "must be ≤") {
			t.Fatalf("raw submit of %s: %v", s.Name, err)
		}
	}
	if !leader.c.IsLeader() {
		t.Fatal("leader lost leadership")
	}
	if _, err := a.c.SubmitJob(ctx, namedSpec("fine")); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionAndPaging: finished jobs beyond the cluster's keep limit are dropped, oldest
// first, on every replica; live jobs stay; listing pages through what is kept.
func TestRetentionAndPaging(t *testing.T) {
	tc := newMockCluster(t)
	tc.keep = 2
	ctx := ctxT(t)
	leader, a, _ := threeVoters(t, tc)
	var ids []string
	for i := range 6 {
		id, err := a.c.SubmitJob(ctx, namedSpec(fmt.Sprintf("j%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids[:4] {
		if err := a.c.CancelJob(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range tc.running() {
		testutil.WaitForErr(t, 10*time.Second, func() error {
			jobs, _ := n.c.FSM().Jobs()
			if len(jobs) != 4 || jobs[0].ID != ids[2] || jobs[1].ID != ids[3] {
				return fmt.Errorf("%s keeps %d jobs", n.name, len(jobs))
			}
			return nil
		})
	}
	var got []string
	var pages int
	for after := ""; ; pages++ {
		page, _, err := a.c.JobsPage(ctx, true, ListArgs{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			got = append(got, j.ID)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if want := ids[2:]; fmt.Sprint(got) != fmt.Sprint(want) || pages != 1 {
		t.Fatalf("paged %v in %d extra pages, want %v", got, pages, want)
	}
	if all, _, err := leader.c.Jobs(ctx, true); err != nil || len(all) != 4 {
		t.Fatalf("all jobs: %d %v", len(all), err)
	}
}

// TestUnknownEntryDoesNotCrashReplicas: an entry of an unknown type reaches every replica
// through raft (before: every replica panicked, again on each replay); each answers it with
// ErrBadEntry and keeps applying what follows.
func TestUnknownEntryDoesNotCrashReplicas(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, a, b := threeVoters(t, tc)
	f := leader.c.raft.Apply([]byte{0x7f, '{', '}'}, time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if err, _ := f.Response().(error); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("unknown entry answered %v", f.Response())
	}
	id, err := a.c.SubmitJob(ctx, namedSpec("after-unknown"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{leader, a, b} {
		waitJob(t, n, id, JobSubmitted)
	}
}
