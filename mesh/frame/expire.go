package frame

import "time"

// ExpireUnknown drops the frames that have waited at least ttl for a job that runs(job)
// says this node does not run, and returns how many it dropped. A peer can send frames
// for any job id; without this, those of a job this node never runs would wait (and count
// against their sender's bound) for as long as the connection lives. The frames of one
// sender and key expire together, once the oldest of them has waited ttl. Receivers are
// not woken: nobody on this node waits for a job it does not run, and a receiver that
// does wait keeps its frames (a job it receives for is one the node runs).
func (m *Mailbox) ExpireUnknown(ttl time.Duration, runs func(job uint64) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.now().Add(-ttl)
	dropped := 0
	for k, s := range m.slots {
		if len(s.frames) == 0 || s.waiters > 0 || s.since.After(cutoff) || runs(k.key.Job) {
			continue
		}
		dropped += m.dropSlotLocked(k, s)
		delete(m.slots, k)
	}
	m.expired += int64(dropped)
	return dropped
}

// Expired is the number of frames ExpireUnknown has dropped.
func (m *Mailbox) Expired() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.expired
}
