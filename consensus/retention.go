package consensus

import (
	"cmp"
	"slices"
)

// Retention of finished jobs. The FSM keeps every live job and the newest KeepFinished
// finished ones (DefaultKeepFinishedJobs unless the cluster commits another number); it
// drops the others in Apply, ordered by the log index at which they finished and then by
// ID, so every replica drops the same jobs.

// MaxSnapshotBytes bounds a snapshot that Restore accepts.
const MaxSnapshotBytes = 256 << 20

func (f *FSM) keepFinished() int {
	if f.state.KeepFinished > 0 {
		return f.state.KeepFinished
	}
	return DefaultKeepFinishedJobs
}

// dropFinished deletes the oldest finished jobs beyond the retention limit.
func (f *FSM) dropFinished() {
	var done []*Job
	for _, j := range f.state.Jobs {
		if j.Status.Terminal() {
			done = append(done, j)
		}
	}
	extra := len(done) - f.keepFinished()
	if extra <= 0 {
		return
	}
	slices.SortFunc(done, func(a, b *Job) int {
		return cmp.Or(cmp.Compare(a.FinishedIndex, b.FinishedIndex), cmp.Compare(a.ID, b.ID))
	})
	for _, j := range done[:extra] {
		delete(f.state.Jobs, j.ID)
	}
}

// KeepFinishedJobs is the retention limit the FSM applies.
func (f *FSM) KeepFinishedJobs() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.KeepFinished
}

// ClusterID is the cluster ID committed to the FSM, "" before the first leader commits it.
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.ClusterID
}
