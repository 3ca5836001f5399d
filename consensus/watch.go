package consensus

import "sync"

// appliedWatch tells waiters that the FSM applied an entry or restored a snapshot, as
// nomad's state store does with its watch sets: Changed returns a channel that is closed
// at the next change, so a reader takes the channel, reads the state, and waits on the
// channel, missing no change that happened after its read.
type appliedWatch struct {
	mu sync.Mutex
	ch chan struct{}
}

// changed returns the channel closed at the next change.
func (w *appliedWatch) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// notify wakes every waiter of the current channel and starts a new one.
func (w *appliedWatch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// Changed returns a channel that is closed when the FSM next applies a command or
// restores a snapshot. Take it before reading the state: a change after the read then
// always closes it.
func (f *FSM) Changed() <-chan struct{} { return f.watch.changed() }
