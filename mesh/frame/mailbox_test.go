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
	m := NewMailbox(10)
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
