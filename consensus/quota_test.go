package consensus

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
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
