package dataplane

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

var testDataProbe = ProbeConfig{Pings: 3, MinBytes: 64 << 10, MaxBytes: 1 << 20, Target: 20 * time.Millisecond, Timeout: 15 * time.Second}

func TestDataPlaneProbe(t *testing.T) {
	ds := dpMesh(t, 2)
	a, b := ds[0], ds[1]
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Both directions at once: replies never wait behind the other side's transfers.
	type result struct {
		rtt time.Duration
		bw  float64
		err error
	}
	res := make([]result, 2)
	var wg sync.WaitGroup
	for i, pair := range [][2]*Plane{{a, b}, {b, a}} {
		wg.Go(func() {
			r := &res[i]
			r.rtt, r.bw, r.err = pair[0].Probe(ctx, pair[1].Self(), testDataProbe)
		})
	}
	wg.Wait()
	for i, r := range res {
		if r.err != nil {
			t.Fatalf("probe %d: %v", i, r.err)
		}
		if r.rtt <= 0 || r.rtt > 5*time.Second || r.bw <= 0 {
			t.Fatalf("probe %d: rtt %v, bandwidth %.0f bit/s", i, r.rtt, r.bw)
		}
		t.Logf("probe %d: rtt %v, bandwidth %.1f Mbit/s", i, r.rtt, r.bw/1e6)
	}
	// Probe frames were consumed by the data plane, counted, and never mailed.
	st := b.Stats()
	if got := st.Received[a.Self()][frame.KindProbe]; got.Frames < int64(testDataProbe.Pings)+1 || got.Bytes < int64(testDataProbe.MinBytes) {
		t.Errorf("b counted %+v probe traffic from a", got)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if f, err := b.Recv(short, a.Self(), frame.Key{Kind: frame.KindProbe}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a probe frame reached the mailbox: %+v, %v", f, err)
	}
	if st.TotalBadFrames() != 0 || a.Stats().TotalBadFrames() != 0 {
		t.Errorf("bad frames counted during well-formed probes")
	}
	// Ordinary frames still flow.
	f := dpTestFrame(frame.KindActivation, 1, 0, []byte("after probes"))
	if err := a.Send(ctx, b.Self(), f); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Recv(ctx, a.Self(), f.Key()); err != nil {
		t.Fatal(err)
	}
}

func TestDataPlaneProbeRefusedPeer(t *testing.T) {
	cfg := dpTestConfig(t, 1)
	cfg.AllowPeer = func(string) bool { return false }
	picky := startDataPlane(t, cfg)
	a := startDataPlane(t, dpTestConfig(t, 2))
	a.SetPeerAddr(picky.Self(), picky.Addr())
	c := testDataProbe
	c.Timeout = 2 * time.Second
	if _, _, err := a.Probe(context.Background(), picky.Self(), c); err == nil {
		t.Fatal("probe of a peer that refuses us succeeded")
	}
	if _, _, err := a.Probe(context.Background(), "nobody", c); !errors.Is(err, ErrNoPeerAddr) {
		t.Fatalf("probe of an unknown peer: got %v, want ErrNoPeerAddr", err)
	}
}

// Malformed probe frames are counted as bad: an oversized data probe is refused in its
// header, an unknown operation or a ping with a payload is dropped.
func TestDataPlaneBadProbeFrames(t *testing.T) {
	d := startDataPlane(t, dpTestConfig(t, 1))
	qc, rawID := dialRaw(t, d, 99)
	probeFrame := func(op uint16, payload []byte) []byte {
		b, err := frame.Append(nil, &frame.Frame{Kind: frame.KindProbe, DType: frame.DTypeU8, Index: op, Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	big := probeFrame(probeOpData, nil)
	binary.LittleEndian.PutUint32(big[48:], frame.MaxProbePayload+1)
	s := rawWrite(t, qc, big, false)
	select {
	case <-s.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("oversized probe frame: stream not reset within 10 s")
	}
	var se *quic.StreamError
	if err := context.Cause(s.Context()); !errors.As(err, &se) || se.ErrorCode != FrameResetTooBig {
		t.Fatalf("oversized probe frame: stream ended with %v, want FrameResetTooBig", err)
	}
	rawWrite(t, qc, probeFrame(9, nil), true)
	rawWrite(t, qc, probeFrame(probeOpPing, []byte("x")), true)
	testutil.WaitFor(t, 10*time.Second, "three bad frames", func() bool { return d.Stats().BadFrames[rawID] == 3 })
}

// TestDataPlaneProbeSurvivesALostPing: a ping (or its pong) that is lost is sent again
// after pingRetry, with a new token, so the probe still measures the link instead of
// failing at its timeout; sent once, it did.
func TestDataPlaneProbeSurvivesALostPing(t *testing.T) {
	ds := dpMesh(t, 2)
	a, b := ds[0], ds[1]
	b.probes.mu.Lock()
	b.probes.lose = 2 // the first ping and its first retry
	b.probes.mu.Unlock()
	cfg := testDataProbe
	cfg.Timeout = 20 * time.Second
	rtt, bw, err := a.Probe(context.Background(), b.Self(), cfg)
	if err != nil {
		t.Fatalf("probe with two pings lost: %v", err)
	}
	b.probes.mu.Lock()
	left := b.probes.lose
	b.probes.mu.Unlock()
	if left != 0 || rtt <= 0 || bw <= 0 {
		t.Fatalf("%d of the 2 losses never happened (want both pings taken as lost, then a pong), rtt %v, bandwidth %.0f bit/s", left, rtt, bw)
	}
}
