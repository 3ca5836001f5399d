package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// TestFSMVerdicts: a verdict lands on its job, malformed ones are bad entries, verdicts
// survive a snapshot, and past MaxVerdictsPerJob the oldest is dropped.
func TestFSMVerdicts(t *testing.T) {
	h := newHarness(t)
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j1", Spec: jobspec.DefaultSpec(), Time: t0})
	v := Verdict{Member: "n1", Accuser: "n2", Convicted: true, Epoch: 1, Step: 30, By: "leader", Time: t0}
	h.mustOK(VerdictType|IgnoreUnknownTypeFlag, VerdictRequest{JobID: "j1", Verdict: v})
	if got := h.job("j1").Verdicts; len(got) != 1 || got[0] != v {
		t.Fatalf("verdicts %+v", got)
	}
	for name, bad := range map[string]Verdict{
		"no leader":      {Member: "n1", Accuser: "n2", Time: t0},
		"self-accusing":  {Member: "n1", Accuser: "n1", By: "leader", Time: t0},
		"no time":        {Member: "n1", Accuser: "n2", By: "leader"},
		"negative step":  {Member: "n1", Accuser: "n2", By: "leader", Time: t0, Step: -1},
		"no member":      {Accuser: "n2", By: "leader", Time: t0},
		"no accuser":     {Member: "n1", By: "leader", Time: t0},
		"reason too big": {Member: "n1", Accuser: "n2", By: "leader", Time: t0, Reason: string(make([]byte, maxMessageLen+1))},
	} {
		if _, ok := h.apply(VerdictType, VerdictRequest{JobID: "j1", Verdict: bad}).(error); !ok {
			t.Errorf("%s: applied", name)
		}
	}
	if _, ok := h.apply(VerdictType, VerdictRequest{JobID: "nope", Verdict: v}).(error); !ok {
		t.Error("a verdict on an unknown job applied")
	}
	restored := NewFSM(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.fsm)))); err != nil {
		t.Fatal(err)
	}
	if j, _, err := restored.Job("j1"); err != nil || len(j.Verdicts) != 1 || j.Verdicts[0] != v {
		t.Fatalf("restored verdicts %+v", j.Verdicts)
	}
	for i := range MaxVerdictsPerJob {
		h.mustOK(VerdictType, VerdictRequest{JobID: "j1", Verdict: Verdict{Member: fmt.Sprintf("m%d", i), Accuser: "n2", By: "leader", Time: t0.Add(time.Hour)}})
	}
	got := h.job("j1").Verdicts
	// The bound holds, and the acquittals pushed out their own oldest, not the conviction
	// (TestAcquittalsDoNotFlushConvictions).
	if len(got) != MaxVerdictsPerJob || got[0] != v || got[1].Member != "m1" {
		t.Fatalf("%d verdicts, first %+v, second %+v: want %d, the conviction kept, acquittal m0 dropped", len(got), got[0], got[1], MaxVerdictsPerJob)
	}
}

// TestVerdictsAreTheLeadersOwn: only the leader commits a verdict, stamped with its own ID
// whatever the caller put there; a follower's is refused (no RPC operation forwards one),
// so a member can never convict another by itself.
func TestVerdictsAreTheLeadersOwn(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, _, _ := threeVoters(t, tc)
	var follower *testNode
	for _, n := range tc.running() {
		if n != leader {
			follower = n
		}
	}
	id, err := leader.c.SubmitJob(ctx, jobspec.DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	v := Verdict{Member: leader.id.String(), Accuser: follower.id.String(), Convicted: true, By: follower.id.String()}
	if err := follower.c.RecordVerdict(ctx, id, v); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower recorded a verdict: %v", err)
	}
	if err := leader.c.RecordVerdict(ctx, id, v); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the verdict on the follower", func() bool {
		j, _, err := follower.c.FSM().Job(id)
		return err == nil && len(j.Verdicts) == 1 && j.Verdicts[0].By == leader.id.String()
	})
}

// TestAcquittalsDoNotFlushConvictions: a plan member that ships a false accusation every
// EvidenceInterval fills the job's verdicts with acquittals; the conviction that keeps its
// partner out of the plan stays (dropping the oldest verdict lost it after 64), and a
// member convicted twice is recorded once.
func TestAcquittalsDoNotFlushConvictions(t *testing.T) {
	h := newHarness(t)
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j1", Spec: jobspec.DefaultSpec(), Time: t0})
	conv := Verdict{Member: "n3", Accuser: "n1", Convicted: true, Epoch: 1, By: "leader", Time: t0}
	h.mustOK(VerdictType|IgnoreUnknownTypeFlag, VerdictRequest{JobID: "j1", Verdict: conv})
	h.mustOK(VerdictType|IgnoreUnknownTypeFlag, VerdictRequest{JobID: "j1", Verdict: conv})
	for i := range 2 * MaxVerdictsPerJob {
		acq := Verdict{Member: "n1", Accuser: "n4", Epoch: 1, Step: i, By: "leader", Time: t0}
		h.mustOK(VerdictType|IgnoreUnknownTypeFlag, VerdictRequest{JobID: "j1", Verdict: acq})
	}
	vs := h.job("j1").Verdicts
	convictions := 0
	for _, v := range vs {
		if v.Convicted {
			convictions++
		}
	}
	if len(vs) != MaxVerdictsPerJob || convictions != 1 {
		t.Fatalf("%d verdicts, %d convictions; want %d and 1", len(vs), convictions, MaxVerdictsPerJob)
	}
	if last := vs[len(vs)-1]; last.Step != 2*MaxVerdictsPerJob-1 {
		t.Errorf("the newest acquittal was not kept: %+v", last)
	}
}
