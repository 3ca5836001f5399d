package dataplane

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// streamPair is two data planes whose QUIC ports cannot reach each other (no address is
// ever set) but whose libp2p hosts, on loopback TCP, are connected: frames must take the
// stream path.
func streamPair(t *testing.T) (a, b *Plane, ha, hb host.Host) {
	t.Helper()
	newHost := func(seed uint64) host.Host {
		h, err := libp2p.New(libp2p.Identity(dpTestKey(t, seed)), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
			libp2p.DisableRelay(), libp2p.DisableMetrics())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	ha, hb = newHost(1), newHost(2)
	start := func(seed uint64, h host.Host) *Plane {
		cfg := dpTestConfig(t, seed)
		cfg.OpenStream = func(ctx context.Context, to string) (network.Stream, string, error) {
			id, err := peer.Decode(to)
			if err != nil {
				return nil, "", err
			}
			s, err := h.NewStream(ctx, id, StreamProtocol)
			return s, PathLibp2p, err
		}
		return startDataPlane(t, cfg)
	}
	a, b = start(1, ha), start(2, hb)
	ha.SetStreamHandler(StreamProtocol, func(s network.Stream) { a.ServeStream(s, PathLibp2p) })
	hb.SetStreamHandler(StreamProtocol, func(s network.Stream) { b.ServeStream(s, PathLibp2p) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ha.Connect(ctx, peer.AddrInfo{ID: hb.ID(), Addrs: hb.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return a, b, ha, hb
}

// TestStreamPath: with no QUIC path, frames go over libp2p streams both ways (the answer
// over the path the peer's frames came on), probes measure that path, and the bytes are
// counted under its kind.
func TestStreamPath(t *testing.T) {
	a, b, _, _ := streamPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 1, 0, []byte("x"))); err == nil {
		t.Fatal("Send without an address or UseStreams succeeded")
	}
	a.UseStreams(b.Self(), true)
	payload := dpPayload(1, 1<<20)
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 1, 0, payload)); err != nil {
		t.Fatal(err)
	}
	got, err := b.Recv(ctx, a.Self(), dpTestFrame(frame.KindActivation, 1, 0, nil).Key())
	if err != nil || !bytes.Equal(got.Payload, payload) {
		t.Fatalf("Recv: %v, or not the %d bytes sent", err, len(payload))
	}
	if err := b.Send(ctx, a.Self(), dpTestFrame(frame.KindGradient, 1, 0, payload[:10])); err != nil {
		t.Fatalf("answer over the stream path: %v", err)
	}
	if _, err := a.Recv(ctx, b.Self(), dpTestFrame(frame.KindGradient, 1, 0, nil).Key()); err != nil {
		t.Fatal(err)
	}
	rtt, bw, err := a.Probe(ctx, b.Self(), ProbeConfig{Pings: 3, MinBytes: 64 << 10, MaxBytes: 1 << 20})
	if err != nil || rtt <= 0 || bw <= 0 {
		t.Fatalf("Probe over streams = %v, %.0f b/s, %v", rtt, bw, err)
	}
	if p := a.Path(b.Self()); p != PathLibp2p {
		t.Fatalf("Path = %q, want %q", p, PathLibp2p)
	}
	if got := a.Stats().Paths[b.Self()][PathLibp2p].Bytes; got < int64(len(payload)) {
		t.Fatalf("bytes on the stream path = %d, want ≥ %d", got, len(payload))
	}
	if b.Connected(a.Self()) || a.Connected(b.Self()) {
		t.Fatal("a QUIC connection was opened")
	}

	// After a hole punch the node renews its streams: frames written before still arrive,
	// the next ones go on new streams.
	old := a.routes[b.Self()].out[frame.KindActivation].s
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 2, 0, payload[:100])); err != nil {
		t.Fatal(err)
	}
	a.RenewStreams(b.Self())
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 3, 0, payload[:100])); err != nil {
		t.Fatal(err)
	}
	for step := uint32(2); step <= 3; step++ {
		if _, err := b.Recv(ctx, a.Self(), dpTestFrame(frame.KindActivation, step, 0, nil).Key()); err != nil {
			t.Fatalf("step %d after RenewStreams: %v", step, err)
		}
	}
	if a.routes[b.Self()].out[frame.KindActivation].s == old {
		t.Fatal("RenewStreams kept the old stream")
	}
}

// TestStreamPathBadFrame: a frame that claims more than MaxPayload on a libp2p stream is
// rejected before allocation, counted, and resets the stream, as on QUIC.
func TestStreamPathBadFrame(t *testing.T) {
	_, b, ha, hb := streamPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := ha.NewStream(ctx, hb.ID(), StreamProtocol)
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := frame.AppendHeader(nil, dpTestFrame(frame.KindActivation, 1, 0, make([]byte, 8)))
	if err != nil {
		t.Fatal(err)
	}
	hdr[48], hdr[49], hdr[50], hdr[51] = 0xff, 0xff, 0xff, 0x7f // payload length ≈ 2 GiB
	if _, err := s.Write(hdr); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the bad frame counted", func() bool {
		return b.Stats().BadFrames[ha.ID().String()] == 1
	})
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("the stream was not reset")
	}
}
