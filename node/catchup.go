package node

import (
	"context"
	"log/slog"
	"time"
)

// A node hands the jobs to its runner only once its FSM has caught up with the leader.
// Raft restores a restarted node's snapshot and replays its log at once, then applies what
// the leader sends in batches: until it has all of it, the node's FSM shows the jobs as
// they were, and a runner handed them acts on the past. CI runs of
// TestKilledReplicaRejoinsFromALivePeer saw both ways this goes wrong: the restarted node
// started a fresh worker of the job's first epoch (step 0, beside replicas at step 300:
// it stalled 60 s and the rejoin failed), and it refused an in-place epoch the leader had
// replaced twice already (the project CI of stop 33).
//
// So the engine asks the leader what it has applied (consensus.LeaderIndex, after a
// barrier), and reconciles once its own FSM has applied as much, as Nomad's clients wait
// for an index before acting on a query: once per control plane, and again after the node
// was out of touch with every leader (consensus.OutOfTouch: a partition it comes back
// from leaves its FSM as far behind as a restart). The leader's own question is answered
// at once, by itself.

// catchUpAsk bounds one question to the leader; the engine asks again at its next pass.
const catchUpAsk = 3 * time.Second

// leaderIndexer is what catchUp needs of the control plane.
type leaderIndexer interface {
	LeaderIndex(ctx context.Context) (uint64, error)
	OutOfTouch() bool
}

// catchUp tracks whether the FSM of one control plane has caught up with its leader. Only
// the engine's loop uses it.
type catchUp struct {
	of     leaderIndexer // the control plane the state below is about
	target uint64        // what the leader had applied when asked
	known  bool          // the leader answered: target holds
	caught bool
	asked  int // questions asked, for the log
}

// done reports whether c's FSM has caught up already and c is in touch with a leader
// (one out of touch must be checked at every tick, to be caught up afresh).
func (u *catchUp) done(c leaderIndexer) bool { return u.of == c && u.caught && !c.OutOfTouch() }

// check reports whether c's FSM, which has applied applied, has caught up with the
// leader, asking the leader first when it does not know how far that is.
func (u *catchUp) check(ctx context.Context, c leaderIndexer, applied uint64, log *slog.Logger) bool {
	if c.OutOfTouch() {
		if u.of == c && u.caught {
			log.Info("out of touch with every leader: acting on jobs again once caught up")
		}
		*u = catchUp{of: c}
		return false
	}
	if u.of != c {
		*u = catchUp{of: c}
	}
	if u.caught {
		return true
	}
	if !u.known {
		ctx, cancel := context.WithTimeout(ctx, catchUpAsk)
		defer cancel()
		u.asked++
		index, err := c.LeaderIndex(ctx)
		if err != nil {
			log.Debug("ask the leader how far its log is applied", "try", u.asked, "err", err)
			return false
		}
		u.target, u.known = index, true
		if applied < u.target {
			log.Info("catching up with the leader before acting on jobs", "applied", applied, "leader_applied", index)
		}
	}
	if applied < u.target {
		return false
	}
	u.caught = true
	return true
}
