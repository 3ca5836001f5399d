package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestIsolateCutsAndRestoresConnections: an isolated peer is disconnected, turns dead,
// cannot dial in or be dialled, and reconnects through bootstrap once the isolation ends.
func TestIsolateCutsAndRestoresConnections(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	b := startMesh(t, testConfig(t, testSecret, a))
	testutil.WaitFor(t, 10*time.Second, "a and b alive to each other", func() bool {
		return peerState(a, b.ID()) == StateAlive && peerState(b, a.ID()) == StateAlive
	})
	a.Isolate([]peer.ID{b.ID()})
	if a.host.Network().Connectedness(b.ID()) == network.Connected {
		t.Fatal("a is still connected to b after isolating it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.host.Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.host.Addrs()}); err == nil {
		// The dial may complete on b's side before a's gater closes it: it must not stay.
		testutil.WaitFor(t, 5*time.Second, "a refuses b's connection", func() bool {
			return a.host.Network().Connectedness(b.ID()) != network.Connected
		})
	}
	testutil.WaitFor(t, 10*time.Second, "a and b dead to each other", func() bool {
		return peerState(a, b.ID()) == StateDead && peerState(b, a.ID()) == StateDead
	})
	a.Isolate(nil)
	testutil.WaitFor(t, 10*time.Second, "a and b alive again (b redials its bootstrap)", func() bool {
		return peerState(a, b.ID()) == StateAlive && peerState(b, a.ID()) == StateAlive
	})
}
