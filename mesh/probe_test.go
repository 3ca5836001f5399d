package mesh

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshnode/meshnode/internal/testutil"
)

func TestProbeOverPipe(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	go func() {
		_ = serveProbe(c2, c2)
		c2.Close()
	}()
	cfg := ProbeConfig{Pings: 3, MinBytes: 1 << 10, MaxBytes: 1 << 20, Target: time.Hour}
	link, err := runProbe(c1, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if link.RTT <= 0 || link.BandwidthBps <= 0 || link.MeasuredAt.IsZero() {
		t.Errorf("incomplete measurement: %+v", link)
	}
}

// countingRW counts data bytes written, to check the adaptive sizing and its cap.
type countingRW struct {
	io.ReadWriter
	written int
}

func (c *countingRW) Write(b []byte) (int, error) {
	c.written += len(b)
	return c.ReadWriter.Write(b)
}

func TestProbeTransferIsCapped(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	go func() { _ = serveProbe(c2, c2); c2.Close() }()
	rw := &countingRW{ReadWriter: c1}
	// A target no transfer reaches: after the first 1 KiB the probe jumps to the size the
	// target asks for, capped at 64 KiB, and stops there.
	if _, err := runProbe(rw, ProbeConfig{Pings: 1, MinBytes: 1 << 10, MaxBytes: 64 << 10, Target: time.Hour}); err != nil {
		t.Fatal(err)
	}
	payload := (1 + 64) << 10
	if rw.written < payload || rw.written > payload+1024 {
		t.Errorf("wrote %d bytes, want about %d", rw.written, payload)
	}
}

func TestServeProbeRejectsMalformed(t *testing.T) {
	frame := func(kind byte, n uint32) []byte {
		b := []byte{kind, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return b
	}
	for name, in := range map[string][]byte{
		"unknown kind":   frame(9, 8),
		"pong to server": frame(probePong, 8),
		"long ping":      frame(probePing, 9),
		"huge data":      frame(probeData, MaxProbeBytes+1),
	} {
		if err := serveProbe(bytes.NewReader(in), io.Discard); !errors.Is(err, errProbeProtocol) {
			t.Errorf("%s: err %v, want a protocol violation", name, err)
		}
	}
	if err := serveProbe(bytes.NewReader(frame(probeData, 100)), io.Discard); err == nil || errors.Is(err, errProbeProtocol) {
		t.Errorf("truncated data: err %v, want a read error", err)
	}
}

func FuzzServeProbe(f *testing.F) {
	var seed bytes.Buffer
	writeProbeFrame(&seed, probePing, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	writeProbeHeader(&seed, probeData, 16)
	seed.Write(make([]byte, 16))
	f.Add(seed.Bytes())
	f.Add(seed.Bytes()[:13])
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = serveProbe(bytes.NewReader(data), io.Discard)
	})
}

// FuzzProbeClient feeds arbitrary server replies to the client side.
func FuzzProbeClient(f *testing.F) {
	var seed bytes.Buffer
	writeProbeHeader(&seed, probeDataAck, 4)
	seed.Write([]byte{0, 0, 0, 16})
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = runProbe(rwPair{bytes.NewReader(data), io.Discard}, ProbeConfig{Pings: 1, MinBytes: 16, MaxBytes: 32, Target: time.Hour})
	})
}

// TestMalformedProbeDisconnects: an admitted peer that sends a bad probe frame is logged,
// counted and disconnected.
func TestMalformedProbeDisconnects(t *testing.T) {
	a := startMesh(t, testConfig(t, testSecret))
	b := startMesh(t, testConfig(t, testSecret, a))
	testutil.WaitFor(t, 10*time.Second, "a admitted at b", func() bool { return b.IsAdmitted(a.ID()) && a.IsAdmitted(b.ID()) })
	disconnected := make(chan struct{}, 1)
	b.host.Network().Notify(&network.NotifyBundle{DisconnectedF: func(_ network.Network, c network.Conn) {
		if c.RemotePeer() == a.ID() {
			select {
			case disconnected <- struct{}{}:
			default:
			}
		}
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := b.NewStream(ctx, a.ID(), ProtocolProbe)
	if err != nil {
		t.Fatal(err)
	}
	s.Write([]byte{probeData, 0xff, 0xff, 0xff, 0xff})
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Error("a answered a malformed probe frame")
	}
	select {
	case <-disconnected:
	case <-ctx.Done():
		t.Fatal("a did not disconnect b")
	}
	if a.Stats().Malformed == 0 {
		t.Error("malformed frame not counted")
	}
}
