package dataplane

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	p2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/internal/testutil"
)

// stalledDial starts a QUIC dial to d that proves nothing: its client certificate is held
// back until the test ends, so d's side of the handshake waits. It returns at once.
func stalledDial(t *testing.T, d *Plane, seed uint64) {
	t.Helper()
	ident, err := p2ptls.NewIdentity(dpTestKey(t, seed))
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := ident.ConfigForPeer(d.self)
	conf.NextProtos = []string{ALPN}
	hold := make(chan struct{})
	conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		<-hold
		return nil, context.Canceled
	}
	ctx, cancel := context.WithCancel(context.Background())
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	done := make(chan struct{})
	t.Cleanup(func() { close(hold); cancel(); <-done; _ = tr.Close(); _ = udp.Close() })
	go func() {
		defer close(done)
		if qc, err := tr.Dial(ctx, d.udp.LocalAddr(), conf, &quic.Config{HandshakeIdleTimeout: time.Minute}); err == nil {
			_ = qc.CloseWithError(0, "")
		}
	}()
}

// TestUnauthenticatedConnectionsAreBounded: connections that never prove their identity
// (before: each kept its handshake ~20 s, without any bound on their number) are at most
// MaxHandshakes at once, the next is refused while an honest peer's connection after
// them works again, and each is dropped after HandshakeTimeout.
func TestUnauthenticatedConnectionsAreBounded(t *testing.T) {
	cfg := dpTestConfig(t, 1)
	cfg.MaxHandshakes, cfg.HandshakeTimeout = 2, time.Second
	srv := startDataPlane(t, cfg)
	honest := startDataPlane(t, dpTestConfig(t, 2))
	honest.SetPeerAddr(srv.Self(), srv.Addr())
	for i := range 2 {
		stalledDial(t, srv, uint64(10+i))
	}
	testutil.WaitFor(t, 5*time.Second, "two handshakes in progress", func() bool { return srv.Stats().Handshaking == 2 })
	stalledDial(t, srv, 12)
	testutil.WaitFor(t, 5*time.Second, "the third refused", func() bool { return srv.Stats().RefusedHandshakes >= 1 })
	// Within HandshakeTimeout (1 s) plus slack, the stalled handshakes are dropped.
	testutil.WaitFor(t, 4*time.Second, "stalled handshakes dropped", func() bool { return srv.Stats().Handshaking == 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := honest.connTo(ctx, srv.Self()); err != nil {
		t.Fatalf("an honest peer after the stalled ones: %v", err)
	}
	testutil.WaitFor(t, 5*time.Second, "the honest connection's slot given back", func() bool { return srv.Stats().Handshaking == 0 })
}
