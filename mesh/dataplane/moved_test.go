package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/mesh/frame"
)

// TestDataPlanePeerRestartsElsewhere: a peer is killed and comes back with the same
// identity on another port; once told its new address, the sender dials it there instead
// of writing into the connection to the dead process.
func TestDataPlanePeerRestartsElsewhere(t *testing.T) {
	a := startDataPlane(t, dpTestConfig(t, 1))
	cfgB := dpTestConfig(t, 2)
	b, err := New(context.Background(), cfgB)
	if err != nil {
		t.Fatal(err)
	}
	a.SetPeerAddr(b.Self(), b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, 1, 0, []byte("before"))); err != nil {
		t.Fatal(err)
	}
	if f, err := b.Recv(ctx, a.Self(), dpTestFrame(frame.KindActivation, 1, 0, nil).Key()); err != nil || string(f.Payload) != "before" {
		t.Fatalf("first frame: %v", err)
	}
	// Kill b without a goodbye: its socket vanishes, a's connection to it stays open.
	b.udp.Close()
	t.Cleanup(func() { b.Close() })
	b2 := startDataPlane(t, cfgB) // same identity, a new port
	a.SetPeerAddr(b2.Self(), b2.Addr())
	if err := a.Send(ctx, b2.Self(), dpTestFrame(frame.KindActivation, 2, 0, []byte("after"))); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	f, err := b2.Recv(rctx, a.Self(), dpTestFrame(frame.KindActivation, 2, 0, nil).Key())
	if err != nil || string(f.Payload) != "after" {
		t.Fatalf("frame to the restarted peer: %v", err)
	}
}
