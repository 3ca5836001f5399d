package dataplane

import (
	"context"
	"sync"
)

// budget bounds the payload bytes of the frames this data plane is receiving at once,
// across every peer and stream. A reader reserves a frame's whole announced payload after
// its header and before reading it, and releases it once the frame is handed on; a frame
// that does not fit waits unread, so QUIC flow control holds its sender back. Reserving
// whole frames (not bytes as they arrive) keeps readers from deadlocking on each other's
// half-grown buffers: a reader holds either its whole reservation or none.
type budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	waits   int64         // reservations that had to wait
	changed chan struct{} // closed and replaced at each release
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, changed: make(chan struct{})}
}

// acquire reserves n bytes, waiting until they fit or ctx ends. n must not exceed the
// limit (Config.Validate makes MaxPayload fit).
func (b *budget) acquire(ctx context.Context, n int64) error {
	b.mu.Lock()
	counted := false
	for b.used+n > b.limit {
		if !counted {
			b.waits++
			counted = true
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
	b.used += n
	b.mu.Unlock()
	return nil
}

// release returns n reserved bytes and wakes the readers waiting for room.
func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// snapshot returns the bytes reserved now and the number of reservations that waited.
func (b *budget) snapshot() (used, waits int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.waits
}
