package frame

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Key identifies a frame a receiver waits for: what it is, of which job, epoch and
// step, for which micro-batch and layer, stage or chunk.
type Key struct {
	Kind  Kind
	Job   uint64
	Epoch uint32
	Step  uint32
	Micro uint16
	Index uint16
}

// Key is the frame's Key.
func (f *Frame) Key() Key {
	return Key{Kind: f.Kind, Job: f.Job, Epoch: f.Epoch, Step: f.Step, Micro: f.Micro, Index: f.Index}
}

// ErrMailboxClosed is returned by Receive after Close.
var ErrMailboxClosed = errors.New("mailbox closed")

// ErrPurged is returned by Receive for a key whose job and epoch were purged: the engine
// left that epoch (replan) or the job (cancel, finish), and the frame will never be used.
var ErrPurged = errors.New("mailbox: job epoch purged")

// maxRetiredJobs bounds how many jobs' purged epochs a mailbox remembers (to drop frames
// that arrive late for them); past it the job purged longest ago is forgotten.
const maxRetiredJobs = 1024

// ErrMailboxFull is returned by Deliver when a sender has buffered more unclaimed bytes or
// frames than the bounds: a peer flooding frames nobody asked for is disconnected.
var ErrMailboxFull = errors.New("mailbox full")

// FrameCost is what a waiting frame costs beyond its payload, charged against its sender's
// byte bound so that frames with no payload are not free: the header as it came on the
// wire and the mailbox's bookkeeping (the decoded Frame, its shape, the slot, its wake
// channel and map entry). Measured: 373 bytes of heap per empty frame each under its own
// key, 429 with its header (TestFrameCostCoversBookkeeping, AMD EPYC 2 vCPU, linux/amd64);
// rounded up.
const FrameCost = 512

type mailKey struct {
	from string
	key  Key
}

type slot struct {
	frames  []*Frame
	waiters int
	wake    chan struct{} // closed and replaced at each delivery
	since   time.Time     // when the oldest frame waiting here arrived (expire.go)
}

// cost is what frame f counts against its sender's byte bound.
func cost(f *Frame) int64 { return int64(len(f.Payload)) + FrameCost }

// Mailbox holds frames that have arrived until the engine asks for them, so that senders
// and receivers need not agree on an order. Frames with the same sender and key are
// received in arrival order. It is safe for concurrent use.
type Mailbox struct {
	mu        sync.Mutex
	slots     map[mailKey]*slot
	buffered  map[string]int64 // unclaimed bytes per sender: payload + FrameCost per frame
	counts    map[string]int   // unclaimed frames per sender
	maxBytes  int64
	maxFrames int
	closed    error
	now       func() time.Time
	expired   int64 // frames of jobs not run here dropped after waiting too long (expire.go)

	retired      map[uint64]uint32 // job → highest purged epoch (purge.go)
	retiredOrder []uint64          // jobs in the order first purged, for eviction
	stale        int64             // frames dropped on arrival for a purged epoch
}

// NewMailbox returns a mailbox that refuses frames from a sender once maxBytes of its
// frames wait unclaimed, each counted as its payload plus FrameCost (≤ 0: no bound).
func NewMailbox(maxBytes int64) *Mailbox { return NewBoundedMailbox(maxBytes, 0) }

// NewBoundedMailbox is NewMailbox that also refuses frames from a sender once maxFrames of
// them wait unclaimed (≤ 0: no bound on the count).
func NewBoundedMailbox(maxBytes int64, maxFrames int) *Mailbox {
	return &Mailbox{slots: map[mailKey]*slot{}, buffered: map[string]int64{}, counts: map[string]int{},
		maxBytes: maxBytes, maxFrames: maxFrames, now: time.Now, retired: map[uint64]uint32{}}
}

func (m *Mailbox) slotLocked(k mailKey) *slot {
	s := m.slots[k]
	if s == nil {
		s = &slot{wake: make(chan struct{})}
		m.slots[k] = s
	}
	return s
}

// Deliver stores a frame that arrived from a peer.
func (m *Mailbox) Deliver(from string, f *Frame) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed != nil {
		return m.closed
	}
	if m.isRetiredLocked(f.Job, f.Epoch) {
		m.stale++
		return nil // a sender finishing an epoch the engine has left
	}
	if m.maxBytes > 0 && m.buffered[from]+cost(f) > m.maxBytes {
		return fmt.Errorf("%w: %s has %d unclaimed bytes, bound %d", ErrMailboxFull, from, m.buffered[from], m.maxBytes)
	}
	if m.maxFrames > 0 && m.counts[from] >= m.maxFrames {
		return fmt.Errorf("%w: %s has %d unclaimed frames, bound %d", ErrMailboxFull, from, m.counts[from], m.maxFrames)
	}
	m.buffered[from] += cost(f)
	m.counts[from]++
	s := m.slotLocked(mailKey{from, f.Key()})
	if len(s.frames) == 0 {
		s.since = m.now()
	}
	s.frames = append(s.frames, f)
	close(s.wake)
	s.wake = make(chan struct{})
	return nil
}

// Receive waits for the next frame from `from` with key k.
func (m *Mailbox) Receive(ctx context.Context, from string, k Key) (*Frame, error) {
	mk := mailKey{from, k}
	m.mu.Lock()
	s := m.slotLocked(mk)
	s.waiters++
	defer func() {
		m.mu.Lock()
		s.waiters--
		if s.waiters == 0 && len(s.frames) == 0 && m.slots[mk] == s {
			delete(m.slots, mk)
		}
		m.mu.Unlock()
	}()
	for {
		if len(s.frames) > 0 {
			f := s.frames[0]
			s.frames[0] = nil
			s.frames = s.frames[1:]
			m.unbufferLocked(from, f)
			m.mu.Unlock()
			return f, nil
		}
		if m.closed != nil {
			m.mu.Unlock()
			return nil, m.closed
		}
		if m.isRetiredLocked(k.Job, k.Epoch) {
			m.mu.Unlock()
			return nil, fmt.Errorf("%w: job %d epoch %d", ErrPurged, k.Job, k.Epoch)
		}
		wake := s.wake
		m.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m.mu.Lock()
	}
}

// unbufferLocked stops counting f against its sender's bounds.
func (m *Mailbox) unbufferLocked(from string, f *Frame) {
	m.buffered[from] -= cost(f)
	if m.counts[from]--; m.counts[from] <= 0 {
		delete(m.buffered, from)
		delete(m.counts, from)
	}
}

// Close wakes every waiter with err (ErrMailboxClosed when nil) and refuses new frames.
func (m *Mailbox) Close(err error) {
	if err == nil {
		err = ErrMailboxClosed
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed != nil {
		return
	}
	m.closed = err
	for _, s := range m.slots {
		close(s.wake)
		s.wake = make(chan struct{})
	}
}
