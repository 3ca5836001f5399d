package consensus

import (
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// leaderWatch counts the leadership changes raft reports to this node: every time the
// leader it knows becomes a different, known server. A loss of the leader (an election in
// progress) is not a change by itself; the next leader is.
type leaderWatch struct {
	changes atomic.Uint64
	last    atomic.Value // raft.ServerID of the last known leader
}

// observer is the raft observer behind the count. It counts in its filter, which raft
// calls synchronously for every observation, and forwards nothing, so it needs no
// goroutine and never drops an observation.
func (w *leaderWatch) observer() *raft.Observer {
	return raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		lo, ok := o.Data.(raft.LeaderObservation)
		if !ok || lo.LeaderID == "" {
			return false
		}
		if prev, _ := w.last.Swap(lo.LeaderID).(raft.ServerID); prev != lo.LeaderID {
			w.changes.Add(1)
		}
		return false
	})
}

// LeaderChanges is the number of times this node has seen the raft leader change to a
// different server since it started, the first leader it learnt of included.
func (c *Consensus) LeaderChanges() uint64 { return c.leaders.changes.Load() }
