package dataplane

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	p2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// dpTestKey is a deterministic ed25519 identity for seed.
func dpTestKey(t testing.TB, seed uint64) crypto.PrivKey {
	t.Helper()
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	key, _, err := crypto.GenerateEd25519Key(rand.NewChaCha8(s))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func dpTestConfig(t testing.TB, seed uint64) Config {
	cfg := DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Identity = dpTestKey(t, seed)
	cfg.Logger = testutil.Logger(t)
	return cfg
}

// startDataPlane starts a data plane closed at the end of the test.
func startDataPlane(t testing.TB, cfg Config) *Plane {
	t.Helper()
	d, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close data plane: %v", err)
		}
	})
	return d
}

// dpMesh starts n data planes (seeds 1..n) that know each other's addresses.
func dpMesh(t testing.TB, n int) []*Plane {
	t.Helper()
	ds := make([]*Plane, n)
	for i := range ds {
		ds[i] = startDataPlane(t, dpTestConfig(t, uint64(i+1)))
	}
	for _, a := range ds {
		for _, b := range ds {
			if a != b {
				a.SetPeerAddr(b.Self(), b.Addr())
			}
		}
	}
	return ds
}

func dpTestFrame(kind frame.Kind, step uint32, micro uint16, payload []byte) *frame.Frame {
	return &frame.Frame{
		Kind: kind, DType: frame.DTypeU8, Job: 7, Epoch: 1, Step: step, Micro: micro, Index: 3,
		Shape: []int{len(payload)}, Payload: payload,
	}
}

func dpPayload(seed uint64, n int) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 0x5a})
	b := make([]byte, n)
	r.Read(b)
	return b
}

// dialRaw opens a QUIC connection to d with the data plane's ALPN and the identity of
// seed, as a hostile peer would, bypassing Plane's sender.
func dialRaw(t testing.TB, d *Plane, seed uint64) (*quic.Conn, string) {
	t.Helper()
	key := dpTestKey(t, seed)
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	ident, err := p2ptls.NewIdentity(key)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := peer.Decode(d.Self())
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := ident.ConfigForPeer(pid)
	conf.NextProtos = []string{ALPN}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, d.Addr(), conf, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc, id.String()
}

// rawWrite writes b on a new unidirectional stream of qc, closing it when fin is set.
func rawWrite(t testing.TB, qc *quic.Conn, b []byte, fin bool) *quic.SendStream {
	t.Helper()
	s, err := qc.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(b); err != nil {
		t.Fatal(err)
	}
	if fin {
		s.Close()
	}
	return s
}

// dpConnected reports whether d has a live connection it would send to peer on.
func dpConnected(d *Plane, peer string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.peers[peer]
	return p != nil && p.conn != nil && p.conn.alive()
}
