package scheduler

import "github.com/meshnode/meshnode/consensus/jobspec"

// Offenders is the set of members a job's event log names offenders (EventOffender):
// replicas whose contributions a worker dropped in several consecutive syncs. The
// scheduler plans the job without them from then on.
func Offenders(events []Event) map[string]bool {
	out := map[string]bool{}
	for _, ev := range events {
		if ev.Kind != jobspec.EventOffender {
			continue
		}
		if m, ok := jobspec.OffenderOf(ev.Message); ok {
			out[m] = true
		}
	}
	return out
}

// withoutOffenders is members less those in offenders (members itself when there are none).
func withoutOffenders(members []Member, offenders map[string]bool) []Member {
	if len(offenders) == 0 {
		return members
	}
	out := make([]Member, 0, len(members))
	for _, m := range members {
		if !offenders[m.ID] {
			out = append(out, m)
		}
	}
	return out
}
