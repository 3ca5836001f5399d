package mesh

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshnode/meshnode/internal/testutil"
)

const testSecret = "test-secret-0123456789abcdef"

// testConfig is a fast configuration on loopback with ephemeral ports.
func testConfig(t testing.TB, secret string, bootstrap ...*Mesh) Config {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Identity = key
	cfg.Mesh = "test"
	cfg.JoinSecret = secret
	cfg.MDNS, cfg.NAT = false, false
	cfg.ListenAddrs = []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1"), ma.StringCast("/ip4/127.0.0.1/tcp/0")}
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.SuspectAfter = time.Second // generous: a loaded 2-core machine, -race
	cfg.DeadAfter = 2 * time.Second
	cfg.AuthTimeout = 2 * time.Second
	cfg.DiscoveryInterval = time.Second
	cfg.Probe = ProbeConfig{Interval: -1, MaxBytes: 256 << 10, MinBytes: 16 << 10, Target: 20 * time.Millisecond, Timeout: 5 * time.Second}
	for _, b := range bootstrap {
		cfg.Bootstrap = append(cfg.Bootstrap, peer.AddrInfo{ID: b.ID(), Addrs: b.host.Addrs()})
	}
	cfg.Logger = testutil.Logger(t)
	return cfg
}

// startMesh creates and starts a mesh, closed when the test ends.
func startMesh(t testing.TB, cfg Config) *Mesh {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func peerState(m *Mesh, p peer.ID) PeerState {
	for _, pi := range m.Peers() {
		if pi.ID == p {
			return pi.State
		}
	}
	return ""
}

func mustAddr(s string) ma.Multiaddr { return ma.StringCast(s) }
