package mesh

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	drouting "github.com/libp2p/go-libp2p/p2p/discovery/routing"
	dutil "github.com/libp2p/go-libp2p/p2p/discovery/util"

	"github.com/meshnode/meshnode/internal/testutil"
)

// TestDHTRendezvous: members advertise themselves under the mesh name in the DHT, so a
// member that knows only the bootstrap node finds the others there.
func TestDHTRendezvous(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	b := startMesh(t, testConfig(t, testSecret, a))
	c := startMesh(t, testConfig(t, testSecret, a))
	rd := drouting.NewRoutingDiscovery(c.kad)
	testutil.WaitFor(t, 15*time.Second, "c to find a and b under the rendezvous", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		found, err := dutil.FindPeers(ctx, rd, rendezvous("test"))
		if err != nil {
			return false
		}
		ids := make([]peer.ID, 0, len(found))
		for _, pi := range found {
			ids = append(ids, pi.ID)
		}
		return slices.Contains(ids, a.ID()) && slices.Contains(ids, b.ID())
	})
}

// TestMDNSDiscovery: two members on one host with no bootstrap address find each other
// through mDNS. The mesh name is unique to this test run.
func TestMDNSDiscovery(t *testing.T) {
	if testing.Short() {
		t.Skip("multicast")
	}
	name := fmt.Sprintf("mdns-%08x", rand.Uint32())
	cfgA, cfgB := testConfig(t, testSecret), testConfig(t, testSecret)
	for _, c := range []*Config{&cfgA, &cfgB} {
		c.Mesh, c.MDNS, c.DHT = name, true, false
		c.ListenAddrs = nil
		c.ListenAddrs = append(c.ListenAddrs, mustAddr("/ip4/0.0.0.0/udp/0/quic-v1"))
	}
	a := startMesh(t, cfgA)
	b := startMesh(t, cfgB)
	testutil.WaitFor(t, 15*time.Second, "a and b alive through mDNS", func() bool {
		return peerState(a, b.ID()) == StateAlive && peerState(b, a.ID()) == StateAlive
	})
}
