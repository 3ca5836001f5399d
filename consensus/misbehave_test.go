package consensus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

// disconnects records the peers whose last connection with a host closed.
type disconnects struct {
	network.NoopNotifiee
	mu    sync.Mutex
	peers []peer.ID
}

func (d *disconnects) Disconnected(n network.Network, c network.Conn) {
	if n.Connectedness(c.RemotePeer()) == network.Connected {
		return // another connection with the peer remains
	}
	d.mu.Lock()
	d.peers = append(d.peers, c.RemotePeer())
	d.mu.Unlock()
}

func (d *disconnects) count(p peer.ID) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, q := range d.peers {
		if q == p {
			n++
		}
	}
	return n
}

// Issue 25: a plan member that shipped the leader evidence that does not decode, or an
// evidence request that breaks its bounds, was refused and stayed connected, free to do
// it again. It is now refused (the same wire error) and then disconnected, counted in
// Disconnects; evidence that decodes but does not convict is a verdict, not a
// disconnection.
func TestMalformedEvidenceDisconnectsItsReporter(t *testing.T) {
	tc := newMockCluster(t)
	ctx := ctxT(t)
	leader, a, _ := threeVoters(t, tc)
	id := runningOn(t, ctx, a, leader, "evidence")
	leader.c.SetEvidenceJudge(func(_ context.Context, j Job, reporter, member string, ev []byte) (bool, string, error) {
		switch string(ev) {
		case "garbage":
			return false, "", fmt.Errorf("%w: no magic (or another version)", ErrMalformedEvidence)
		case "no dataset":
			return false, "", errors.New("job names no dataset blob") // the leader's own limit
		}
		return false, "the leader's judge keeps the accused's contribution", nil
	})
	seen := &disconnects{}
	leader.h.Network().Notify(seen)
	t.Cleanup(func() { leader.h.Network().StopNotify(seen) })
	next := func() { // past EvidenceInterval, without waiting for it
		leader.c.evidence.mu.Lock()
		clear(leader.c.evidence.last)
		leader.c.evidence.mu.Unlock()
	}

	for _, ev := range []string{"innocent", "no dataset"} {
		err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte(ev))
		if ev == "no dataset" && !errors.Is(err, ErrBadRequest) || ev == "innocent" && err != nil {
			t.Fatalf("%s evidence: %v", ev, err)
		}
		next()
	}
	if n := leader.c.Disconnects(); n != 0 || seen.count(a.id) != 0 {
		t.Fatalf("evidence that decodes, or that the leader could not check, disconnected its reporter (%d)", n)
	}

	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("garbage")); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("undecodable evidence: %v, want ErrBadRequest", err)
	}
	// The refusal is answered first, then the reporter disconnected.
	testutil.WaitFor(t, 10*time.Second, "the reporter of undecodable evidence disconnected", func() bool {
		return leader.c.Disconnects() == 1 && seen.count(a.id) == 1
	})
	next()
	both := EvidenceRequest{JobID: id, Member: leader.id.String(), Evidence: []byte("x"), Blob: "b"}
	if err := a.c.do(ctx, "evidence", both, nil); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("evidence request with bytes and a blob: %v, want ErrBadRequest", err)
	}
	testutil.WaitFor(t, 10*time.Second, "the sender of a malformed evidence request disconnected", func() bool {
		return leader.c.Disconnects() == 2 && seen.count(a.id) == 2
	})
	// The leader keeps serving: the reporter reconnects and is heard again.
	next()
	if err := a.c.ShipEvidence(ctx, id, leader.id.String(), []byte("innocent")); err != nil {
		t.Fatalf("evidence after the disconnection: %v", err)
	}
	if _, err := leader.c.SubmitJob(ctx, namedSpec("after")); err != nil {
		t.Fatal(err)
	}
	// Evidence shipped as a blob is fetched from the reporter alone and verified by its
	// hash: a blob that does not decode is the reporter's own, and disconnects it once judged.
	leader.c.SetEvidenceFetcher(func(context.Context, Job, peer.ID, string, int64) ([]byte, error) {
		return []byte("garbage"), nil
	})
	testutil.WaitFor(t, 10*time.Second, "the judge done", func() bool {
		leader.c.evidence.mu.Lock()
		defer leader.c.evidence.mu.Unlock()
		clear(leader.c.evidence.last)
		return len(leader.c.evidence.busy) == 0
	})
	// The judgement runs beside the RPC's answer, so the disconnection may cut the answer.
	_ = a.c.ShipEvidenceBlob(ctx, id, leader.id.String(), strings.Repeat("b", 64), 7)
	testutil.WaitFor(t, 10*time.Second, "the reporter of an undecodable evidence blob disconnected", func() bool {
		return leader.c.Disconnects() == 3 && seen.count(a.id) == 3
	})
}
