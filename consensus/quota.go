package consensus

import (
	"fmt"
	"sync"
)

// A member's live jobs are bounded: every spec is kept by every replica, listed to every
// client and planned by the leader, so one member submitting without end would make job
// listings fail for everyone and push the snapshot past its cap. The leader counts the
// live (not finished) jobs each member submitted (Job.SubmittedBy, the authenticated
// caller) and refuses a submit beyond the cluster's quota with ErrQuota. Users submit
// through their own node's API, so the member is the node they use. The quota is a
// replicated cluster setting (issue 25: it was each leader's own flag, so a leader change
// changed it): the founding leader commits its Config.MaxLiveJobsPerMember with the cluster
// metadata and the FSM keeps that value for good.

// DefaultMaxLiveJobsPerMember is Config.MaxLiveJobsPerMember's default.
const DefaultMaxLiveJobsPerMember = 16

// MaxMaxLiveJobsPerMember bounds Config.MaxLiveJobsPerMember.
const MaxMaxLiveJobsPerMember = 1024

// submitGate serialises submits on the leader, so that the count a submit is checked
// against includes every submit before it (propose returns once the leader applied it).
type submitGate struct {
	mu          sync.Mutex
	barrierTerm uint64 // the term in which the leader last waited for its FSM to catch up
}

// LiveJobsOf counts the jobs member id submitted that are not finished.
func (f *FSM) LiveJobsOf(id string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := 0
	for _, j := range f.state.Jobs {
		if j.SubmittedBy == id && !j.Status.Terminal() {
			n++
		}
	}
	return n
}

// MaxLiveJobsPerMember is the cluster's quota of live jobs per member, 0 before a leader
// committed it. It is replicated: the first leader to commit cluster metadata sets it from
// its Config.MaxLiveJobsPerMember, and no later leader changes it, so the quota does not
// move with the leadership.
func (f *FSM) MaxLiveJobsPerMember() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.MaxLiveJobs
}

// checkQuota refuses a submit by member id when it already has the most live jobs allowed:
// the cluster's quota, or this leader's own setting before one is committed.
func (c *Consensus) checkQuota(id string) error {
	limit := c.fsm.MaxLiveJobsPerMember()
	if limit == 0 {
		limit = c.cfg.MaxLiveJobsPerMember
	}
	if n := c.fsm.LiveJobsOf(id); n >= limit {
		return fmt.Errorf("%w: member %s has %d live jobs, the limit is %d per member (consensus.Config.MaxLiveJobsPerMember, meshnode join --max-live-jobs); cancel one or wait for one to finish",
			ErrQuota, id, n, limit)
	}
	return nil
}
