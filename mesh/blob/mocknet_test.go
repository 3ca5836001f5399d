package blob

import (
	"context"
	"testing"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// streamHost adapts a libp2p host to Host, as mesh.Mesh does without the admission guard.
type streamHost struct{ h host.Host }

func (s streamHost) Handle(pid protocol.ID, handler network.StreamHandler) {
	s.h.SetStreamHandler(pid, handler)
}

func (s streamHost) NewStream(ctx context.Context, p peer.ID, pid protocol.ID) (network.Stream, error) {
	return s.h.NewStream(ctx, p, pid)
}

// startMockHosts starts n hosts on an in-memory network, every pair linked and connected,
// closed when the test ends.
func startMockHosts(t testing.TB, n int) []host.Host {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	hosts := make([]host.Host, n)
	for i := range hosts {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatal(err)
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		t.Fatal(err)
	}
	return hosts
}
