package frame

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
)

// empty is a frame with no payload under its own key (step), as a flooding peer sends it.
func empty(job uint64, step uint32) *Frame {
	return &Frame{Kind: KindScalar, DType: DTypeF32, Job: job, Step: step, Shape: []int{0}}
}

// Issue 25: frames with no payload were not counted against their sender's bound; 500k of
// them held 186 MiB. Each frame now costs FrameCost beyond its payload.
func TestEmptyFramesCountAgainstTheBound(t *testing.T) {
	const bound = 1 << 20
	m := NewMailbox(bound)
	accepted := 0
	for step := range uint32(4 * bound / FrameCost) {
		if err := m.Deliver("p", empty(1, step)); err != nil {
			if !errors.Is(err, ErrMailboxFull) {
				t.Fatalf("frame %d: %v", step, err)
			}
			break
		}
		accepted++
	}
	if want := bound / FrameCost; accepted != want {
		t.Fatalf("%d empty frames accepted under a %d-byte bound, want %d (FrameCost %d each)", accepted, bound, want, FrameCost)
	}
	if err := m.Deliver("q", empty(1, 0)); err != nil {
		t.Fatalf("another sender refused: %v", err)
	}
}

// The count of waiting frames per sender is bounded too, whatever their size.
func TestFrameCountIsBoundedPerSender(t *testing.T) {
	m := NewBoundedMailbox(0, 100)
	for step := range uint32(100) {
		if err := m.Deliver("p", empty(1, step)); err != nil {
			t.Fatalf("frame %d of 100: %v", step, err)
		}
	}
	if err := m.Deliver("p", empty(1, 100)); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("frame 101 of a 100-frame bound: %v", err)
	}
	if _, err := m.Receive(context.Background(), "p", empty(1, 0).Key()); err != nil {
		t.Fatal(err)
	}
	if err := m.Deliver("p", empty(1, 100)); err != nil {
		t.Fatalf("a received frame did not free its place: %v", err)
	}
}

// FrameCost must cover what an empty frame really holds in memory while it waits: the
// decoded frame, its shape and the mailbox's slot for its key. Measured on the heap.
func TestFrameCostCoversBookkeeping(t *testing.T) {
	const n = 20000
	m := NewMailbox(0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for step := range uint32(n) {
		if err := m.Deliver("p", empty(1, step)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perFrame := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	per := perFrame + HeaderSize // the header as it arrived, read into a buffer
	t.Logf("an empty frame holds %d bytes of heap in the mailbox (+%d of header): %d; FrameCost %d", perFrame, HeaderSize, per, FrameCost)
	if per > FrameCost {
		t.Fatalf("an empty waiting frame costs %d bytes, FrameCost charges %d", per, FrameCost)
	}
	runtime.KeepAlive(m)
}

// Issue 25: frames for a job this node never runs waited for good. Once they have waited
// the TTL they are dropped and counted, and their sender's bound is freed; frames of jobs
// the node runs, and frames a receiver waits for, stay.
func TestFramesOfUnknownJobsExpire(t *testing.T) {
	const ttl = time.Minute
	m := NewMailbox(4 * FrameCost)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	runs := func(job uint64) bool { return job == 7 }
	for _, f := range []*Frame{empty(7, 0), empty(9, 0), empty(9, 1)} {
		if err := m.Deliver("p", f); err != nil {
			t.Fatal(err)
		}
	}
	received := make(chan error)
	go func() {
		_, err := m.Receive(context.Background(), "q", empty(9, 5).Key())
		received <- err
	}()
	testWaitForWaiter(t, m, "q")
	now = now.Add(ttl - time.Second)
	if n := m.ExpireUnknown(ttl, runs); n != 0 {
		t.Fatalf("%d frames expired before the TTL", n)
	}
	now = now.Add(time.Second)
	if n := m.ExpireUnknown(ttl, runs); n != 2 {
		t.Fatalf("%d frames of the unknown job expired, want 2", n)
	}
	if frames, bytes, _ := m.Waiting(); frames != 1 || bytes != FrameCost {
		t.Fatalf("after expiry %d frames, %d bytes wait; want the run job's 1, %d", frames, bytes, FrameCost)
	}
	if m.Expired() != 2 {
		t.Fatalf("expired counter %d, want 2", m.Expired())
	}
	if err := m.Deliver("q", empty(9, 5)); err != nil {
		t.Fatal(err)
	}
	if err := <-received; err != nil {
		t.Fatalf("a waiting receiver lost its frame: %v", err)
	}
	if f, err := m.Receive(context.Background(), "p", empty(7, 0).Key()); err != nil || f.Job != 7 {
		t.Fatalf("the run job's frame: %v", err)
	}
}

// testWaitForWaiter waits until a Receive from `from` is registered.
func testWaitForWaiter(t *testing.T, m *Mailbox, from string) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "the receiver waiting", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		for k, s := range m.slots {
			if k.from == from && s.waiters > 0 {
				return true
			}
		}
		return false
	})
}
