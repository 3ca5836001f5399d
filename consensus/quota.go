package consensus

import (
	"fmt"
	"sync"
)

// A member's live jobs are bounded: every spec is kept by every replica, listed to every
// client and planned by the leader, so one member submitting without end would make job
// listings fail for everyone and push the snapshot past its cap. The leader counts the
// live (not finished) jobs each member submitted (Job.SubmittedBy, the authenticated
// caller) and refuses a submit beyond Config.MaxLiveJobsPerMember with ErrQuota. Users
// submit through their own node's API, so the member is the node they use.

// DefaultMaxLiveJobsPerMember is Config.MaxLiveJobsPerMember's default.
const DefaultMaxLiveJobsPerMember = 16

// MaxMaxLiveJobsPerMember bounds Config.MaxLiveJobsPerMember.
const MaxMaxLiveJobsPerMember = 1024

// submitGate serialises submits on the leader, so that the count a submit is checked
// against includes every submit before it (propose returns once the leader applied it).
type submitGate struct{ mu sync.Mutex }

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

// checkQuota refuses a submit by member id when it already has the most live jobs allowed.
func (c *Consensus) checkQuota(id string) error {
	limit := c.cfg.MaxLiveJobsPerMember
	if n := c.fsm.LiveJobsOf(id); n >= limit {
		return fmt.Errorf("%w: member %s has %d live jobs, the limit is %d per member (consensus.Config.MaxLiveJobsPerMember, meshnode join --max-live-jobs); cancel one or wait for one to finish",
			ErrQuota, id, n, limit)
	}
	return nil
}
