package node

import (
	"context"
	"crypto/rand"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/dataplane"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// A data plane on a wildcard host announces what peers elsewhere can reach first and
// loopback last, never link-local or multicast, within the profile's bound.
func TestDataCandidates(t *testing.T) {
	ifaces := addrs("127.0.0.1", "::1", "10.211.0.2", "fe80::1", "2001:db8::2", "192.168.1.5", "::ffff:172.17.0.1")
	observed := addrs("203.0.113.9", "10.211.0.2", "127.0.0.1")
	for _, c := range []struct {
		bound string
		want  []string
	}{
		{"[::]:4243", []string{"10.211.0.2:4243", "192.168.1.5:4243", "172.17.0.1:4243", "203.0.113.9:4243", "[2001:db8::2]:4243", "127.0.0.1:4243"}},
		{"0.0.0.0:4243", []string{"10.211.0.2:4243", "192.168.1.5:4243", "172.17.0.1:4243", "203.0.113.9:4243", "127.0.0.1:4243"}},
	} {
		got := dataCandidates(netip.MustParseAddrPort(c.bound), ifaces, observed)
		if !slices.Equal(got, c.want) {
			t.Errorf("bound %s:\n got %q\nwant %q", c.bound, got, c.want)
		}
		for _, a := range got {
			if err := mesh.ValidDataAddr(a); err != nil {
				t.Errorf("candidate %q: %v", a, err)
			}
		}
	}
	// A host with many addresses: the list stops at the bound and keeps loopback.
	var many []netip.Addr
	for i := range 20 {
		many = append(many, netip.AddrFrom4([4]byte{10, 0, byte(i), 1}))
	}
	got := dataCandidates(netip.MustParseAddrPort("[::]:1"), append(many, addrs("127.0.0.1")...), observed)
	if len(got) != mesh.MaxDataAddrs || got[len(got)-1] != "127.0.0.1:1" {
		t.Errorf("many interfaces: %q", got)
	}
	if got := (&mesh.Profile{DataAddrs: got}); got.Validate() != nil {
		t.Errorf("the list does not validate: %v", got.Validate())
	}
}

// A node listening on the wildcard announces its interface addresses and loopback last,
// never loopback alone; --data-advertise replaces the whole list.
func TestNodeAnnouncesInterfaceAddresses(t *testing.T) {
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	cfg.DataListen = ":0"
	n := startNode(t, cfg)
	got := n.DataAddrs()
	if len(got) == 0 || !strings.HasPrefix(got[len(got)-1], "127.0.0.1:") && !strings.HasPrefix(got[len(got)-1], "[::1]:") {
		t.Fatalf("DataAddrs = %q: want loopback last", got)
	}
	t.Logf("announced %q", got)
	testutil.WaitFor(t, 10*time.Second, "the profile carrying the candidates", func() bool {
		p := n.Mesh().Profile()
		return p != nil && slices.Equal(p.DataAddrs, got) && p.DataAddr == got[0]
	})

	cfg = testConfig(t)
	cfg.Consensus.Disabled = true
	cfg.DataListen, cfg.DataAdvertise = ":0", "192.0.2.10:4243"
	if got := startNode(t, cfg).DataAddrs(); !slices.Equal(got, []string{"192.0.2.10:4243"}) {
		t.Errorf("with DataAdvertise: %q", got)
	}
}

func testPlane(t *testing.T) *dataplane.Plane {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dataplane.DefaultConfig()
	cfg.ListenAddr, cfg.Identity, cfg.Logger = "127.0.0.1:0", key, testutil.Logger(t)
	dp, err := dataplane.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	return dp
}

// The prober keeps the candidate where the peer's own key answers: an impostor's address
// (another node, as a peer's loopback candidate is from elsewhere) and a silent one are
// passed over, and a silent preferred candidate costs about the stagger, not the
// per-candidate timeout.
func TestProberReachesTheConfirmedCandidate(t *testing.T) {
	self, peer, other := testPlane(t), testPlane(t), testPlane(t)
	silent, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &linkProber{ctx: ctx, confirmTimeout: 5 * time.Second, confirmStagger: 100 * time.Millisecond}

	start := time.Now()
	got, err := l.reach(self, peer.Self(), []string{silent.LocalAddr().String(), other.Addr(), peer.Addr()})
	if err != nil || got != peer.Addr() {
		t.Fatalf("reach = %q, %v; want %s", got, err, peer.Addr())
	}
	if took := time.Since(start); took >= l.confirmTimeout {
		t.Errorf("took %v: the silent first candidate held up the others", took)
	}

	l.confirmTimeout = 300 * time.Millisecond
	_, err = l.reach(self, peer.Self(), []string{silent.LocalAddr().String(), other.Addr()})
	if err == nil {
		t.Fatal("reached the peer where it does not listen")
	}
	if !strings.Contains(err.Error(), other.Addr()) || !strings.Contains(err.Error(), silent.LocalAddr().String()) {
		t.Errorf("the error does not name every candidate: %v", err)
	}
}
