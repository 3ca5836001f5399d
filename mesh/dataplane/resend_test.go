package dataplane

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/meshnode/meshnode/mesh/frame"
)

// TestResendKeepsRecentSmallFrames: a connection keeps copies of the small frames written
// on it (not the caller's buffers), drops frames over resendMaxFrame and the oldest past
// resendMaxBytes, and takeRecent hands back those since a time, oldest first, and forgets
// all.
func TestResendKeepsRecentSmallFrames(t *testing.T) {
	c := &peerConn{}
	payload := []byte("held set")
	c.remember(&frame.Frame{Kind: frame.KindScalar, Step: 1, Payload: payload})
	payload[0] = 'X' // the caller reuses its buffer
	c.remember(&frame.Frame{Kind: frame.KindActivation, Step: 2, Payload: make([]byte, resendMaxFrame+1)})
	if len(c.recent) != 1 || string(c.recent[0].f.Payload) != "held set" {
		t.Fatalf("kept %d frames, first %q: want one copy of the small frame", len(c.recent), c.recent[0].f.Payload)
	}
	for i := range resendMaxBytes / resendMaxFrame {
		c.remember(&frame.Frame{Kind: frame.KindScalar, Step: uint32(3 + i), Payload: make([]byte, resendMaxFrame)})
	}
	if c.recentBytes > resendMaxBytes || c.recent[0].f.Step != 3 {
		t.Fatalf("kept %d bytes from step %d: want at most %d, the oldest dropped", c.recentBytes, c.recent[0].f.Step, resendMaxBytes)
	}
	c.recent[0].at = time.Now().Add(-time.Minute)
	got := c.takeRecent(time.Now().Add(-resendWindow))
	if len(got) != resendMaxBytes/resendMaxFrame-1 || got[0].Step != 4 {
		t.Fatalf("took %d frames from step %d: want all but the old one, oldest first", len(got), got[0].Step)
	}
	if len(c.recent) != 0 || c.recentBytes != 0 {
		t.Fatalf("%d frames, %d bytes still kept after takeRecent", len(c.recent), c.recentBytes)
	}
	// Once taken, the connection has ended and its resend has run: a frame written now
	// is not kept (Send sends it again itself), and forget says so.
	late := &frame.Frame{Kind: frame.KindScalar, Step: 99, Payload: []byte("late")}
	if c.remember(late) || len(c.recent) != 0 {
		t.Fatalf("a frame written after the resend was kept (%d kept): no resend would carry it", len(c.recent))
	}
	if c.forget(late) {
		t.Fatal("forget found a frame that was never kept")
	}
	if !c.remember(&frame.Frame{Kind: frame.KindActivation, Payload: make([]byte, resendMaxFrame+1)}) {
		t.Fatal("a large frame, never kept, reported as lost to a drained connection")
	}
	k := &peerConn{}
	kept := &frame.Frame{Kind: frame.KindScalar, Step: 1, Payload: []byte("x")}
	if !k.remember(kept) || !k.forget(kept) || k.forget(kept) {
		t.Fatal("forget does not report the frame it dropped exactly once")
	}
}

// TestSwallowedIsResetOrConfirm: only a stateless reset, or the peer's ConnConfirmed
// close, proves that nothing written on a connection was read; any other end (a close by
// this side, the peer's other codes, an idle timeout) resends nothing.
func TestSwallowedIsResetOrConfirm(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  bool
	}{
		{&quic.StatelessResetError{}, true},
		{fmt.Errorf("wrapped: %w", &quic.StatelessResetError{}), true},
		{&quic.ApplicationError{Remote: true, ErrorCode: ConnConfirmed}, true},
		{&quic.ApplicationError{Remote: false, ErrorCode: ConnConfirmed}, false},
		{&quic.ApplicationError{Remote: true, ErrorCode: ConnTooMany}, false},
		{&quic.IdleTimeoutError{}, false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := swallowed(tc.cause); got != tc.want {
			t.Errorf("swallowed(%v) = %v, want %v", tc.cause, got, tc.want)
		}
	}
}

// TestFrameWrittenAfterTheResendIsSentAgain: a connection whose resend has already run
// (it ended, and what it swallowed was taken) may still be handed to a Send that chose it
// a moment before; the frame that Send writes is carried by no resend, so Send sends it
// again itself and counts it. Here the drained connection stays the peer's (in a real
// reset serveConn forgets it first), so the second write goes on it too and arrives.
func TestFrameWrittenAfterTheResendIsSentAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds := dpMesh(t, 2)
	a, b := ds[0], ds[1]
	sendAndRecv(ctx, t, a, b, 1)
	sendPeerConnOf(t, a, b.Self()).takeRecent(time.Now()) // the resend ran
	sendAndRecv(ctx, t, a, b, 2)
	if n := a.Stats().ResentFrames[b.Self()]; n != 1 {
		t.Fatalf("%d frames sent again after a write on a drained connection, want 1", n)
	}
	sendAndRecv(ctx, t, a, b, 3)
	if n := a.Stats().ResentFrames[b.Self()]; n != 2 {
		t.Fatalf("%d frames sent again, want 2: every frame written on it is", n)
	}
}
