package mesh

import (
	"context"
	"crypto/rand"
	"io"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshnode/meshnode/internal/testutil"
)

// servedProtocols stand for the protocols other packages serve through Mesh.Handle
// (consensus, blob): the admission guard must hold for any of them.
var servedProtocols = []protocol.ID{"/meshnode/raft/1.0.0", "/meshnode/rpc/1.0.0", "/meshnode/blob/1.0.0"}

// meshProtocols is every meshnode protocol an outsider might try, with gossipsub's.
var meshProtocols = append([]protocol.ID{
	ProtocolProbe, dhtPrefix + "/kad/1.0.0", "/meshsub/1.1.0", "/meshsub/1.2.0",
}, servedProtocols...)

// countingHandlers registers handlers for the protocols other packages will serve and
// counts how often any of them runs.
func countingHandlers(m *Mesh) *atomic.Int64 {
	var n atomic.Int64
	for _, p := range servedProtocols {
		m.Handle(p, func(s network.Stream) { n.Add(1); s.Close() })
	}
	return &n
}

func inTable(m *Mesh, p peer.ID) bool {
	return slices.ContainsFunc(m.Peers(), func(pi PeerInfo) bool { return pi.ID == p })
}

func TestWrongSecretIsRefused(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	served := countingHandlers(a)
	b := startMesh(t, testConfig(t, testSecret, a))
	x := startMesh(t, testConfig(t, "another-secret-0123456789", a, b))
	testutil.WaitFor(t, 10*time.Second, "a and b alive, x refused by both", func() bool {
		if inTable(a, x.ID()) || inTable(b, x.ID()) || inTable(x, a.ID()) || inTable(x, b.ID()) {
			t.Fatal("the peer with the wrong secret appeared in a peer table")
		}
		return peerState(a, b.ID()) == StateAlive && peerState(b, a.ID()) == StateAlive &&
			a.gater.isBanned(x.ID()) && b.gater.isBanned(x.ID())
	})
	assertRefused(t, a, x.host)
	assertRefused(t, b, x.host)
	if a.Stats().AuthFailures == 0 {
		t.Error("a counted no auth failure")
	}
	if n := served.Load(); n != 0 {
		t.Errorf("meshnode handlers ran %d times for a refused peer", n)
	}
	// x keeps retrying its bootstrap peers; over several more heartbeats it still never
	// shows up anywhere.
	later := time.Now().Add(500 * time.Millisecond)
	testutil.WaitFor(t, 5*time.Second, "several more heartbeats", func() bool {
		if inTable(a, x.ID()) || inTable(b, x.ID()) {
			t.Fatal("the peer with the wrong secret appeared in a peer table")
		}
		ps := a.Peers()
		return len(ps) == 1 && ps[0].LastSeen.After(later)
	})
}

// assertRefused checks that outsider is disconnected from m, refused by m's gater, and
// cannot use any meshnode protocol even if it tries to reconnect. (A dialler may see its
// handshake finish before the listener's gater closes the connection, so a reconnect
// attempt is judged by what it can do, not by Connect's result.)
func assertRefused(t *testing.T, m *Mesh, outsider interface {
	Network() network.Network
	Connect(context.Context, peer.AddrInfo) error
	NewStream(context.Context, peer.ID, ...protocol.ID) (network.Stream, error)
}) {
	t.Helper()
	op := outsider.Network().LocalPeer()
	testutil.WaitFor(t, 5*time.Second, "outsider disconnected", func() bool {
		return m.host.Network().Connectedness(op) != network.Connected
	})
	if m.gater.InterceptPeerDial(op) || m.gater.InterceptSecured(network.DirInbound, op, nil) {
		t.Errorf("%s's gater still lets the refused peer in", m.ID())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = outsider.Connect(ctx, peer.AddrInfo{ID: m.ID(), Addrs: m.host.Addrs()})
	for _, pid := range meshProtocols {
		if err := useStream(ctx, outsider, m.ID(), pid); err == nil {
			t.Errorf("refused peer used %s", pid)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "outsider disconnected after reconnecting", func() bool {
		return m.host.Network().Connectedness(op) != network.Connected
	})
	if m.IsAdmitted(op) || inTable(m, op) {
		t.Errorf("refused peer admitted or listed")
	}
}

// TestSilentPeerCannotUseProtocols connects a plain libp2p host that never authenticates:
// while it waits, every meshnode stream it opens is reset unserved; after its last auth
// attempt it is disconnected and held off (refused for a while, not banned for long).
func TestSilentPeerCannotUseProtocols(t *testing.T) {
	cfg := testConfig(t, testSecret)
	cfg.AuthTimeout = time.Second
	a := startMesh(t, cfg)
	served := countingHandlers(a)
	out, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/udp/0/quic-v1"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := out.Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	errs := make(chan error, len(meshProtocols))
	for _, pid := range meshProtocols {
		go func() { errs <- useStream(ctx, out, a.ID(), pid) }()
	}
	for range meshProtocols {
		if err := <-errs; err == nil {
			t.Error("a stream from a silent peer was served")
		} else {
			t.Logf("stream refused: %v", err)
		}
	}
	testutil.Within(t, "refusing a silent peer (auth timeout 1 s)", time.Since(start), 3*time.Second)
	if n := served.Load(); n != 0 {
		t.Errorf("meshnode handlers ran %d times for a silent peer", n)
	}
	if inTable(a, out.ID()) {
		t.Error("silent peer in the peer table")
	}
	// The peer gets three attempts (1 s, 2 s, 4 s) before it is disconnected and held off.
	testutil.WaitFor(t, 30*time.Second, "the silent peer held off", func() bool { return a.gater.isBanned(out.ID()) })
	if a.Stats().AuthRetries < authAttempts-1 {
		t.Errorf("%d auth retries before giving up, want %d", a.Stats().AuthRetries, authAttempts-1)
	}
	assertRefused(t, a, out)
}

// TestSlowHonestPeerIsAdmittedAfterRetry: a peer that knows the secret but misses the
// first auth attempt (a slow link, a loaded machine) is not banned: the exchange is tried
// again with more time, and the peer is admitted on its second attempt.
func TestSlowHonestPeerIsAdmittedAfterRetry(t *testing.T) {
	cfg := testConfig(t, testSecret)
	cfg.AuthTimeout = time.Second
	a := startMesh(t, cfg)
	slow, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/udp/0/quic-v1"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	var attempts atomic.Int64
	slow.SetStreamHandler(ProtocolAuth, func(s network.Stream) {
		if attempts.Add(1) == 1 {
			// The first exchange is answered too late: nothing is sent until a gives up on
			// it and resets the stream.
			_, _ = io.Copy(io.Discard, s)
			_ = s.Reset()
			return
		}
		party := authParty{secret: []byte(testSecret), mesh: "test", self: slow.ID(), remote: s.Conn().RemotePeer(), rand: rand.Reader}
		if err := party.respond(s); err != nil {
			t.Errorf("slow peer's answer: %v", err)
			_ = s.Reset()
			return
		}
		_ = s.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := slow.Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 30*time.Second, "the slow peer admitted", func() bool {
		if a.gater.isBanned(slow.ID()) {
			t.Fatal("the slow but honest peer was banned")
		}
		return a.IsAdmitted(slow.ID())
	})
	if n := attempts.Load(); n < 2 {
		t.Fatalf("admitted after %d auth attempts: the first one was meant to miss", n)
	}
	if st := a.Stats(); st.AuthRetries == 0 || st.AuthFailures != 0 {
		t.Errorf("stats %+v: want a retry and no failure", st)
	}
}

// useStream opens pid and tries one request: it fails unless the remote serves it.
func useStream(ctx context.Context, h interface {
	NewStream(context.Context, peer.ID, ...protocol.ID) (network.Stream, error)
}, p peer.ID, pid protocol.ID) error {
	s, err := h.NewStream(ctx, p, pid)
	if err != nil {
		return err
	}
	defer s.Reset()
	ping := []byte{probePing, 0, 0, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8}
	if _, err := s.Write(ping); err != nil {
		return err
	}
	_, err = io.ReadFull(s, make([]byte, 1))
	return err
}

func TestAllowlistRefusesOthers(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	bcfg := testConfig(t, testSecret, a)
	b, err := New(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ccfg := testConfig(t, testSecret, a)
	ccfg.AllowPeers = []peer.ID{a.ID(), b.ID()}
	c := startMesh(t, ccfg)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "a, b, c alive everywhere", func() bool {
		return peerState(c, b.ID()) == StateAlive && peerState(b, c.ID()) == StateAlive && peerState(c, a.ID()) == StateAlive
	})
	// d knows the secret but is not on c's allowlist.
	d := startMesh(t, testConfig(t, testSecret, a))
	testutil.WaitFor(t, 10*time.Second, "d alive at a", func() bool { return peerState(a, d.ID()) == StateAlive })
	assertRefused(t, c, d.host)
	// d's heartbeats reach c through a, and c ignores them.
	later := time.Now().Add(500 * time.Millisecond)
	testutil.WaitFor(t, 5*time.Second, "several more heartbeats at c", func() bool {
		if inTable(c, d.ID()) {
			t.Fatal("a peer outside c's allowlist is in c's peer table")
		}
		return peerState(c, a.ID()) == StateAlive && slices.ContainsFunc(c.Peers(), func(pi PeerInfo) bool {
			return pi.ID == a.ID() && pi.LastSeen.After(later)
		})
	})
}
