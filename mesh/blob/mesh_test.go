package blob

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh"
)

const testSecret = "test-secret-0123456789abcdef"

// startTestMesh starts a mesh member on loopback with ephemeral ports, bootstrapping from
// boot, closed when the test ends. The blob service needs an admitted host, so its tests
// run on real meshes rather than bare hosts.
func startTestMesh(t testing.TB, boot ...*mesh.Mesh) *mesh.Mesh {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := mesh.DefaultConfig()
	cfg.Identity = key
	cfg.Mesh = "test"
	cfg.JoinSecret = testSecret
	cfg.MDNS, cfg.NAT = false, false
	cfg.ListenAddrs = []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/udp/0/quic-v1"), ma.StringCast("/ip4/127.0.0.1/tcp/0")}
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.SuspectAfter = time.Second // generous: a loaded 2-core machine, -race
	cfg.DeadAfter = 2 * time.Second
	cfg.AuthTimeout = 2 * time.Second
	cfg.DiscoveryInterval = time.Second
	cfg.Probe = mesh.ProbeConfig{Interval: -1}
	for _, b := range boot {
		cfg.Bootstrap = append(cfg.Bootstrap, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()})
	}
	cfg.Logger = testutil.Logger(t)
	m, err := mesh.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}
