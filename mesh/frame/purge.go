package frame

// Purge drops every frame waiting in the mailbox for job whose epoch is at most
// throughEpoch, and returns how many it dropped. The engine calls it when it leaves an
// epoch (replan: Purge(job, old)) or a job (cancel, finish: Purge(job, current)), so that
// frames nobody will ask for stop counting against their senders' MailboxBytes. Frames for
// those epochs that arrive later are dropped on arrival, and receivers waiting for them
// return ErrPurged. The mailbox remembers the purged epochs of the last maxRetiredJobs jobs.
func (m *Mailbox) Purge(job uint64, throughEpoch uint32) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retireLocked(job, throughEpoch)
	dropped := 0
	for k, s := range m.slots {
		if k.key.Job != job || k.key.Epoch > throughEpoch {
			continue
		}
		dropped += m.dropSlotLocked(k, s)
		if s.waiters == 0 {
			delete(m.slots, k)
			continue
		}
		close(s.wake) // waiters see the purge and return ErrPurged
		s.wake = make(chan struct{})
	}
	return dropped
}

// dropSlotLocked drops the frames waiting in s (under key k) and returns how many.
func (m *Mailbox) dropSlotLocked(k mailKey, s *slot) int {
	n := len(s.frames)
	for _, f := range s.frames {
		m.unbufferLocked(k.from, f)
	}
	s.frames = nil
	return n
}

// Waiting reports the frames held in the mailbox and the bytes they count against their
// senders' bounds (payload plus FrameCost each), and the frames dropped on arrival because
// their epoch had been purged.
func (m *Mailbox) Waiting() (frames int, bytes, stale int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.slots {
		frames += len(s.frames)
	}
	for _, b := range m.buffered {
		bytes += b
	}
	return frames, bytes, m.stale
}

func (m *Mailbox) retireLocked(job uint64, epoch uint32) {
	old, known := m.retired[job]
	if known {
		m.retired[job] = max(old, epoch)
		return
	}
	if len(m.retiredOrder) >= maxRetiredJobs {
		delete(m.retired, m.retiredOrder[0])
		m.retiredOrder = m.retiredOrder[1:]
	}
	m.retired[job] = epoch
	m.retiredOrder = append(m.retiredOrder, job)
}

func (m *Mailbox) isRetiredLocked(job uint64, epoch uint32) bool {
	through, ok := m.retired[job]
	return ok && epoch <= through
}
