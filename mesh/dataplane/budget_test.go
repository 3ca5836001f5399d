package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Frames being received share one global budget: while a peer holds most of it with a
// frame it announced and has not finished sending, another peer's frame that does not fit
// waits unread instead of being allocated, and goes through once the first completes.
func TestDataPlaneInFlightBudget(t *testing.T) {
	const kib = 1 << 10
	cfg := dpTestConfig(t, 1)
	cfg.MaxPayload, cfg.MaxInFlightBytes = 64*kib, 64*kib
	d := startDataPlane(t, cfg)
	slowConn, slowID := dialRaw(t, d, 98)
	fastConn, fastID := dialRaw(t, d, 99)

	big := dpTestFrame(frame.KindActivation, 1, 0, dpPayload(1, 60*kib))
	bigWire, err := frame.Append(nil, big)
	if err != nil {
		t.Fatal(err)
	}
	split := frame.HeaderSize + kib
	slow := rawWrite(t, slowConn, bigWire[:split], false) // announces 60 KiB, sends 1 KiB
	testutil.WaitFor(t, 10*time.Second, "the announced 60 KiB reserved", func() bool {
		return d.Stats().InFlightBytes == 60*kib
	})

	small := dpTestFrame(frame.KindGradient, 1, 0, dpPayload(2, 30*kib))
	smallWire, err := frame.Append(nil, small)
	if err != nil {
		t.Fatal(err)
	}
	rawWrite(t, fastConn, smallWire, true)
	testutil.WaitFor(t, 10*time.Second, "the second frame waiting for room", func() bool {
		st := d.Stats()
		return st.InFlightWaits == 1 && st.InFlightBytes == 60*kib
	})

	if _, err := slow.Write(bigWire[split:]); err != nil {
		t.Fatal(err)
	}
	slow.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, w := range []struct {
		from string
		f    *frame.Frame
	}{{slowID, big}, {fastID, small}} {
		got, err := d.Recv(ctx, w.from, w.f.Key())
		if err != nil || len(got.Payload) != len(w.f.Payload) {
			t.Fatalf("frame of kind %d: %v", w.f.Kind, err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the budget released", func() bool { return d.Stats().InFlightBytes == 0 })
}

func TestConfigRefusesBudgetBelowMaxPayload(t *testing.T) {
	cfg := dpTestConfig(t, 1)
	cfg.MaxPayload, cfg.MaxInFlightBytes = 1<<20, 1<<19
	if err := cfg.Validate(); err == nil {
		t.Fatal("a budget smaller than one frame was accepted")
	}
}
