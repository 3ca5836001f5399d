package frame

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestMailboxMatchesKeysInAnyOrder(t *testing.T) {
	m := NewMailbox(0)
	ctx := context.Background()
	a := &Frame{Kind: KindActivation, Step: 1, Micro: 0, Payload: []byte{1}}
	b := &Frame{Kind: KindActivation, Step: 1, Micro: 1, Payload: []byte{2}}
	m.Deliver("p", b)
	var wg sync.WaitGroup
	wg.Add(1)
	var got *Frame
	go func() {
		defer wg.Done()
		got, _ = m.Receive(ctx, "p", a.Key())
	}()
	m.Deliver("p", a)
	wg.Wait()
	if got != a {
		t.Fatal("receiver of micro-batch 0 got another frame")
	}
	if f, _ := m.Receive(ctx, "p", b.Key()); f != b {
		t.Fatal("micro-batch 1 lost")
	}
}

func TestMailboxBoundsAndClose(t *testing.T) {
	m := NewMailbox(10 + FrameCost)
	if err := m.Deliver("p", &Frame{Kind: KindScalar, Payload: make([]byte, 8)}); err != nil {
		t.Fatal(err)
	}
	if err := m.Deliver("p", &Frame{Kind: KindScalar, Step: 1, Payload: make([]byte, 8)}); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("flood accepted: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := m.Receive(ctx, "p", Key{Kind: KindGradient}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("receive without a frame: %v", err)
	}
	done := make(chan error)
	go func() {
		_, err := m.Receive(context.Background(), "p", Key{Kind: KindGradient})
		done <- err
	}()
	m.Close(nil)
	if err := <-done; !errors.Is(err, ErrMailboxClosed) {
		t.Fatalf("waiter after Close: %v", err)
	}
}

// Frames of an epoch the engine left used to stay in the mailbox for good and count
// against their sender's bound until it could send nothing more. Purge drops them, frees
// the sender's bound, drops late arrivals for the purged epoch, wakes their receivers
// with ErrPurged, and leaves other epochs and jobs alone.
func TestMailboxPurgeByJobAndEpoch(t *testing.T) {
	m := NewMailbox(100 + 6*FrameCost)
	ctx := context.Background()
	frame := func(job uint64, epoch uint32, step uint32, n int) *Frame {
		return &Frame{Kind: KindActivation, Job: job, Epoch: epoch, Step: step, Payload: make([]byte, n)}
	}
	for step := range uint32(4) {
		if err := m.Deliver("p", frame(7, 1, step, 20)); err != nil { // epoch 1, never received
			t.Fatal(err)
		}
	}
	keep := frame(7, 2, 0, 10)
	other := frame(8, 1, 0, 5)
	m.Deliver("p", keep)
	m.Deliver("q", other)
	if err := m.Deliver("p", frame(7, 2, 1, 20)); !errors.Is(err, ErrMailboxFull) {
		t.Fatalf("stale frames should fill p's bound before the purge: %v", err)
	}
	waiter := make(chan error)
	go func() {
		_, err := m.Receive(ctx, "p", frame(7, 1, 9, 0).Key())
		waiter <- err
	}()

	if n := m.Purge(7, 1); n != 4 {
		t.Fatalf("purged %d frames, want 4", n)
	}
	if err := <-waiter; !errors.Is(err, ErrPurged) {
		t.Fatalf("a receiver of the purged epoch: %v, want ErrPurged", err)
	}
	if frames, bytes, _ := m.Waiting(); frames != 2 || bytes != 15+2*FrameCost {
		t.Fatalf("after the purge: %d frames, %d bytes waiting; want 2, %d", frames, bytes, 15+2*FrameCost)
	}
	if err := m.Deliver("p", frame(7, 2, 1, 80)); err != nil {
		t.Fatalf("p's bound was not freed: %v", err)
	}
	if err := m.Deliver("p", frame(7, 1, 5, 50)); err != nil {
		t.Fatalf("a late frame of the purged epoch: %v", err)
	}
	if _, _, stale := m.Waiting(); stale != 1 {
		t.Fatalf("late frame of the purged epoch: %d dropped, want 1", stale)
	}
	if f, err := m.Receive(ctx, "p", keep.Key()); err != nil || f != keep {
		t.Fatalf("the next epoch's frame: %v", err)
	}
	if f, err := m.Receive(ctx, "q", other.Key()); err != nil || f != other {
		t.Fatalf("another job's frame: %v", err)
	}
}

// The mailbox remembers purged epochs for a bounded number of jobs.
func TestMailboxPurgeMemoryIsBounded(t *testing.T) {
	m := NewMailbox(0)
	for job := range uint64(3 * maxRetiredJobs) {
		m.Purge(job, 1)
	}
	if len(m.retired) != maxRetiredJobs || len(m.retiredOrder) != maxRetiredJobs {
		t.Fatalf("%d jobs remembered, bound %d", len(m.retired), maxRetiredJobs)
	}
	if !m.isRetiredLocked(3*maxRetiredJobs-1, 1) || m.isRetiredLocked(0, 1) {
		t.Fatal("the newest purge was forgotten or the oldest kept")
	}
}
