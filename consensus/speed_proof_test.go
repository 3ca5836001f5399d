package consensus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestFSMSpeedProofs: a proof is kept per node (the latest wins), out-of-bounds proofs are
// bad entries, a node's own upserts never touch its proof, proofs survive a snapshot, and
// past MaxSpeedProofs the oldest is dropped.
func TestFSMSpeedProofs(t *testing.T) {
	h := newHarness(t)
	p := SpeedProof{ID: "n1", ClaimGFLOPS: 1e6, GFLOPS: 31.5, Time: t0, By: "leader"}
	h.mustOK(SpeedProofType|IgnoreUnknownTypeFlag, SpeedProofRequest{Proof: p})
	h.mustOK(NodeUpsertType, NodeUpsertRequest{Node: Node{ID: "n1", Status: NodeAlive, Profile: Profile{GFLOPS: 1e6}}})
	if got, ok := h.fsm.SpeedProof("n1"); !ok || got != p {
		t.Fatalf("proof %+v, %v", got, ok)
	}
	for name, bad := range map[string]SpeedProof{
		"negative":          {ID: "n1", GFLOPS: -1, By: "leader"},
		"beyond the bounds": {ID: "n1", GFLOPS: 2e7, By: "leader"},
		"wrong yet proved":  {ID: "n1", GFLOPS: 1, Wrong: true, By: "leader"},
		"no leader":         {ID: "n1", GFLOPS: 1},
	} {
		if _, ok := h.apply(SpeedProofType, SpeedProofRequest{Proof: bad}).(error); !ok {
			t.Errorf("%s: applied", name)
		}
	}
	wrong := SpeedProof{ID: "n1", ClaimGFLOPS: 1e6, Wrong: true, Time: t0.Add(time.Second), By: "leader"}
	h.mustOK(SpeedProofType, SpeedProofRequest{Proof: wrong})
	restored := NewFSM(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, h.fsm)))); err != nil {
		t.Fatal(err)
	}
	if got, ok := restored.SpeedProof("n1"); !ok || got != wrong {
		t.Fatalf("restored proof %+v, %v", got, ok)
	}
	for i := range MaxSpeedProofs {
		h.mustOK(SpeedProofType, SpeedProofRequest{Proof: SpeedProof{ID: fmt.Sprintf("m%d", i), GFLOPS: 1, Time: t0.Add(time.Hour), By: "leader"}})
	}
	if _, ok := h.fsm.SpeedProof("n1"); ok {
		t.Fatal("the oldest proof was kept past MaxSpeedProofs")
	}
	if _, ok := h.fsm.SpeedProof(fmt.Sprintf("m%d", MaxSpeedProofs-1)); !ok {
		t.Fatal("the newest proof was dropped")
	}
}

// TestSpeedProofsAreTheLeadersOwn: only the leader commits a proof, stamped with its own
// ID whatever the caller put there, and every replica then holds it; a follower's is
// refused (there is no RPC operation that would forward it).
func TestSpeedProofsAreTheLeadersOwn(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, _, _ := threeVoters(t, tc)
	var follower *testNode
	for _, n := range tc.running() {
		if n != leader {
			follower = n
		}
	}
	claim := SpeedProof{ID: follower.id.String(), ClaimGFLOPS: 1e6, GFLOPS: 1e6, By: follower.id.String()}
	if err := follower.c.RecordSpeedProof(ctx, claim); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a follower recorded its own proof: %v", err)
	}
	proved := SpeedProof{ID: follower.id.String(), ClaimGFLOPS: 1e6, GFLOPS: 42, By: follower.id.String()}
	if err := leader.c.RecordSpeedProof(ctx, proved); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the proof on the follower", func() bool {
		p, ok := follower.c.FSM().SpeedProof(follower.id.String())
		return ok && p.GFLOPS == 42 && p.By == leader.id.String()
	})
}
