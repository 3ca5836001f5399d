package consensus

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// TestLiveJobQuotaPerMember: one member submitting without end (before: 17 submits of
// large specs made consistent listings fail for everyone) is refused beyond its quota of
// live jobs, with an error naming the limit, also when it sends the submit straight to the
// leader; other members still submit; a finished job frees a slot.
func TestLiveJobQuotaPerMember(t *testing.T) {
	tc := newMockCluster(t)
	tc.quota = 3
	ctx := ctxT(t)
	leader, a, b := threeVoters(t, tc)
	var ids []string
	for i := range 3 {
		id, err := a.c.SubmitJob(ctx, namedSpec(fmt.Sprintf("a%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	_, err := a.c.SubmitJob(ctx, namedSpec("a-over"))
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "the limit is 3 per member") {
		t.Fatalf("4th live job: %v, want ErrQuota naming the limit", err)
	}
	if _, err := a.c.call(ctx, leader.id, "submit", mustJSON(t, SubmitArgs{Spec: namedSpec("a-raw")})); !errors.Is(err, ErrQuota) {
		t.Fatalf("4th live job sent straight to the leader: %v, want ErrQuota", err)
	}
	if _, err := b.c.SubmitJob(ctx, namedSpec("b0")); err != nil {
		t.Fatalf("another member's submit: %v", err)
	}
	if err := a.c.CancelJob(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.SubmitJob(ctx, namedSpec("a-after-cancel")); err != nil {
		t.Fatalf("submit after a job finished: %v", err)
	}
	if j, _, err := leader.c.Job(ctx, ids[1], false); err != nil || j.SubmittedBy != a.id.String() {
		t.Fatalf("job %s submitted by %q (%v), want %s", ids[1], j.SubmittedBy, err, a.id)
	}
}

// TestSubmitRefusesHugePaths: a member that skips its own validation and sends the leader
// a spec with a 2 MiB data path (before: each such spec was a large share of every
// listing and of the snapshot) is refused naming the field.
func TestSubmitRefusesHugePaths(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, a, _ := threeVoters(t, tc)
	spec := namedSpec("huge-path")
	spec.Data = jobspec.Data{Source: "/" + strings.Repeat("a", 1<<20)}
	_, err := a.c.call(ctx, leader.id, "submit", mustJSON(t, SubmitArgs{Spec: spec}))
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), "data.source: must be a path of at most 1024 bytes") {
		t.Fatalf("raw submit of a 1 MiB path: %.200v", err)
	}
}

// Issue 25: the quota was the leader's own --max-live-jobs, so a leader change changed it.
// It is now the founding leader's, replicated in the FSM: a member at the quota stays
// refused after a leader configured with a larger one takes over.
func TestLiveJobQuotaSurvivesALeaderChange(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	tc.quota = 2
	n0 := tc.add(true)
	tc.quota = 5
	n1, n2 := tc.add(false), tc.add(false)
	tc.waitMembers(15*time.Second, []*testNode{n0, n1, n2}, nil)
	if leader := tc.waitLeader(5 * time.Second); leader != n0 {
		t.Fatalf("%s leads, want the founder", leader.name)
	}
	for i := range 2 {
		if _, err := n1.c.SubmitJob(ctx, namedSpec(fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "n2 applied the cluster's quota", func() bool { return n2.c.fsm.MaxLiveJobsPerMember() == 2 })
	if err := n0.c.futureErr(ctx, n0.c.raft.LeadershipTransferToServer(raft.ServerID(n2.id.String()), raft.ServerAddress(n2.id.String()))); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "n2 leads", n2.c.IsLeader)
	_, err := n1.c.SubmitJob(ctx, namedSpec("a-over"))
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "the limit is 2 per member") {
		t.Fatalf("3rd live job under a leader configured with 5: %v, want ErrQuota at the cluster's 2", err)
	}
	if q := n2.c.fsm.MaxLiveJobsPerMember(); q != 2 {
		t.Fatalf("the new leader changed the cluster's quota to %d", q)
	}
}
