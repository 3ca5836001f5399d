package mesh

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshnode/meshnode/internal/testutil"
)

// newUnstartedMesh creates a mesh that admits and serves but does not gossip, discover or
// dial on its own (no Start), so the test alone decides who connects to whom.
func newUnstartedMesh(t *testing.T) *Mesh {
	t.Helper()
	m, err := New(testConfig(t, testSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func connectAndAdmit(t *testing.T, a, b *Mesh) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.host.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "mutual admission", func() bool { return a.IsAdmitted(b.ID()) && b.IsAdmitted(a.ID()) })
}

// outsider is a plain libp2p host that does not know the join secret.
func outsider(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestRelayBetweenMembers: a member (A) holds a reservation on a relay member (R); another
// member (B) that cannot dial A reaches it through R, is admitted over the relayed
// (limited) connection and opens a stream that allows it; the circuit carries meshnode's
// limits, not libp2p's 128 KiB default. An outsider can neither reserve a slot on R nor
// reach A through it.
func TestRelayBetweenMembers(t *testing.T) {
	r, a, b, circuit := relayedMembers(t, RelayConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	o := outsider(t)
	if err := o.Connect(ctx, peer.AddrInfo{ID: r.ID(), Addrs: r.host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Reserve(ctx, o, peer.AddrInfo{ID: r.ID()}); err == nil {
		t.Fatal("an outsider reserved a relay slot")
	}
	if err := o.Connect(ctx, circuit); err == nil {
		t.Fatal("an outsider reached a member through the relay")
	}
	if got := r.Stats().RelayRefused; got < 2 {
		t.Fatalf("RelayRefused = %d, want ≥ 2 (the outsider's reservation and circuit)", got)
	}

	s := relayedEcho(t, ctx, a, b, circuit)
	if _, err := s.Write([]byte("tensor")); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	got, err := io.ReadAll(s)
	if err != nil || string(got) != "tensor" {
		t.Fatalf("echo = %q, %v", got, err)
	}
	limit, _ := s.Conn().Stat().Extra[client.StatLimitData].(uint64)
	if want := uint64(r.cfg.Relay.resources().Limit.Data); limit != want {
		t.Fatalf("circuit data limit = %d, want meshnode's %d", limit, want)
	}
}

// TestRelayCircuitBytesLimit: a relay resets a circuit that carries more than
// RelayConfig.CircuitBytes in one direction.
func TestRelayCircuitBytesLimit(t *testing.T) {
	const limit = 64 << 10
	_, a, b, circuit := relayedMembers(t, RelayConfig{CircuitBytes: limit})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := relayedEcho(t, ctx, a, b, circuit)
	go func() {
		_, _ = s.Write(make([]byte, 8*limit))
		_ = s.CloseWrite()
	}()
	n, err := io.Copy(io.Discard, s)
	if err == nil || n >= 8*limit {
		t.Fatalf("echoed %d bytes (err %v) through a relay bounded to %d per circuit", n, err, limit)
	}
	t.Logf("circuit reset after %d bytes echoed: %v", n, err)
}

// relayedMembers sets up members A and B that cannot dial each other directly (as if each
// sat behind its own NAT), both admitted by relay member R configured with rc, and A holding
// a reservation on R; circuit is A's address through R.
func relayedMembers(t *testing.T, rc RelayConfig) (r, a, b *Mesh, circuit peer.AddrInfo) {
	t.Helper()
	cfg := testConfig(t, testSecret)
	cfg.Relay = rc
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	a, b = newUnstartedMesh(t), newUnstartedMesh(t)
	// A and B cannot dial each other directly, as if each sat behind its own NAT: only the
	// circuit connects them.
	noDirect := func(other peer.ID) func(peer.ID, ma.Multiaddr) bool {
		return func(p peer.ID, addr ma.Multiaddr) bool {
			_, err := addr.ValueForProtocol(ma.P_CIRCUIT)
			return p != other || err == nil
		}
	}
	a.gater.addrFilter, b.gater.addrFilter = noDirect(b.ID()), noDirect(a.ID())
	if err := r.startRelay(); err != nil { // testConfig turns NAT (and so the relay) off
		t.Fatal(err)
	}
	connectAndAdmit(t, a, r)
	connectAndAdmit(t, b, r)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Reserve(ctx, a.host, peer.AddrInfo{ID: r.ID()}); err != nil {
		t.Fatalf("member's reservation: %v", err)
	}
	circuit = peer.AddrInfo{ID: a.ID(), Addrs: []ma.Multiaddr{
		r.host.Addrs()[0].Encapsulate(ma.StringCast("/p2p/" + r.ID().String() + "/p2p-circuit"))}}
	return r, a, b, circuit
}

// relayedEcho has B reach A through the circuit, checks that they admit each other over
// the relayed connection, and returns B's stream to an echo service on A.
func relayedEcho(t *testing.T, ctx context.Context, a, b *Mesh, circuit peer.AddrInfo) network.Stream {
	t.Helper()
	a.Handle("/test/echo", func(s network.Stream) {
		_, _ = io.Copy(s, s)
		_ = s.Close()
	})
	if err := b.host.Connect(network.WithAllowLimitedConn(ctx, "test"), circuit); err != nil {
		t.Fatalf("member through the relay: %v", err)
	}
	testutil.WaitFor(t, 15*time.Second, "admission over the relayed connection", func() bool {
		return a.IsAdmitted(b.ID()) && b.IsAdmitted(a.ID())
	})
	if p := b.ConnPath(a.ID()); p != PathRelayed {
		t.Fatalf("ConnPath = %q, want %q", p, PathRelayed)
	}
	s, err := b.NewStream(ctx, a.ID(), "/test/echo")
	if err != nil {
		t.Fatalf("stream over the relayed connection: %v", err)
	}
	return s
}

// TestStreamPathNamesPunchedConnections: a stream on a direct connection is "libp2p" until
// hole punching reports that it reached that peer, then "hole-punched".
func TestStreamPathNamesPunchedConnections(t *testing.T) {
	a, b := newUnstartedMesh(t), newUnstartedMesh(t)
	connectAndAdmit(t, a, b)
	b.Handle("/test/sink", func(s network.Stream) { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := a.NewStream(ctx, b.ID(), "/test/sink")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if p := a.StreamPath(s); p != PathLibp2p {
		t.Fatalf("StreamPath before a punch = %q, want %q", p, PathLibp2p)
	}
	a.punches.Trace(&holepunch.Event{Remote: b.ID(), Type: holepunch.EndHolePunchEvtT, Evt: &holepunch.EndHolePunchEvt{Success: false}})
	if p := a.ConnPath(b.ID()); p != PathLibp2p {
		t.Fatalf("ConnPath after a failed punch = %q, want %q", p, PathLibp2p)
	}
	a.punches.Trace(&holepunch.Event{Remote: b.ID(), Type: holepunch.EndHolePunchEvtT, Evt: &holepunch.EndHolePunchEvt{Success: true}})
	if p := a.StreamPath(s); p != PathHolePunched {
		t.Fatalf("StreamPath after a punch = %q, want %q", p, PathHolePunched)
	}
}
