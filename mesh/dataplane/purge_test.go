package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Frames of an epoch the receiver's engine left (a replan) used to stay in its mailbox and
// count against the sender, which was disconnected once they filled MailboxBytes. After
// Purge the sender's next epoch goes through on the same connection.
func TestDataPlanePurgeFreesTheSender(t *testing.T) {
	cfgA, cfgB := dpTestConfig(t, 1), dpTestConfig(t, 2)
	cfgB.MailboxBytes = 64 << 10
	a, b := startDataPlane(t, cfgA), startDataPlane(t, cfgB)
	a.SetPeerAddr(b.Self(), b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for step := range uint32(3) { // 60 KiB of epoch 1 nobody will receive
		if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, step, 0, dpPayload(uint64(step), 20<<10))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, 10*time.Second, "epoch 1's frames in b's mailbox", func() bool {
		return b.Stats().ReceivedBytes(frame.KindActivation) == 60<<10
	})
	if n := b.Purge(7, 1); n != 3 { // dpTestFrame: job 7, epoch 1
		t.Fatalf("purged %d frames, want 3", n)
	}
	next := dpTestFrame(frame.KindActivation, 0, 0, dpPayload(9, 20<<10))
	next.Epoch = 2
	if err := a.Send(ctx, b.Self(), next); err != nil {
		t.Fatal(err)
	}
	got, err := b.Recv(ctx, a.Self(), next.Key())
	if err != nil || len(got.Payload) != len(next.Payload) {
		t.Fatalf("the next epoch's frame: %v", err)
	}
	if n := b.Stats().MailboxOverflows[a.Self()]; n != 0 {
		t.Fatalf("the sender was disconnected %d times for stale frames", n)
	}
}
