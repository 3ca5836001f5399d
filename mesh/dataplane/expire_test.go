package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Issue 25: frames for a job the receiver never runs waited in its mailbox (up to
// MailboxBytes per peer) for as long as the connection lived. They now expire after
// UnknownJobTTL and are counted; the frames of a job it runs stay.
func TestFramesOfJobsNotRunHereExpire(t *testing.T) {
	cfgA, cfgB := dpTestConfig(t, 1), dpTestConfig(t, 2)
	cfgB.RunsJob = func(job uint64) bool { return job == 8 }
	cfgB.UnknownJobTTL = 200 * time.Millisecond
	a, b := startDataPlane(t, cfgA), startDataPlane(t, cfgB)
	a.SetPeerAddr(b.Self(), b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for step := range uint32(3) { // dpTestFrame: job 7, which b does not run
		if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindActivation, step, 0, dpPayload(uint64(step), 1<<10))); err != nil {
			t.Fatal(err)
		}
	}
	mine := dpTestFrame(frame.KindActivation, 0, 0, dpPayload(9, 1<<10))
	mine.Job = 8
	if err := a.Send(ctx, b.Self(), mine); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the unknown job's frames expired", func() bool { return b.Stats().ExpiredFrames == 3 })
	if frames, _, _ := b.box.Waiting(); frames != 1 {
		t.Fatalf("%d frames wait after expiry, want the run job's 1", frames)
	}
	got, err := b.Recv(ctx, a.Self(), mine.Key())
	if err != nil || got.Job != 8 {
		t.Fatalf("the run job's frame: %v", err)
	}
}

// Issue 25: empty frames were free, so a peer could hold any number of them. A peer past
// MailboxFrames unclaimed frames is disconnected, and b keeps serving others.
func TestEmptyFrameFloodDisconnectsThePeer(t *testing.T) {
	cfgA, cfgB := dpTestConfig(t, 1), dpTestConfig(t, 2)
	cfgB.MailboxFrames = 50
	a, b := startDataPlane(t, cfgA), startDataPlane(t, cfgB)
	a.SetPeerAddr(b.Self(), b.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for step := range uint32(60) {
		if err := a.Send(ctx, b.Self(), dpTestFrame(frame.KindScalar, step, 0, nil)); err != nil {
			break // the disconnection reached a
		}
	}
	testutil.WaitFor(t, 10*time.Second, "the flooding peer disconnected", func() bool { return b.Stats().MailboxOverflows[a.Self()] > 0 })
	if frames, _, _ := b.box.Waiting(); frames > 50 {
		t.Fatalf("%d frames of the flooding peer wait, bound 50", frames)
	}
}
