package scheduler

import (
	"maps"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Offenders is the set of members that more than half of a plan named offenders
// (EventOffender: a worker dropped the member's contributions in several consecutive
// syncs), counting each reporter once and never a member naming itself. A single
// member's word is not enough, or any admitted member could have honest nodes excluded;
// the honest workers of a plan each see an offender's contributions and each report it.
// The scheduler plans the job without offenders from then on.
//
// An accusation counts only in the plan epoch it was made in, against that epoch's plan,
// and only between two of its nodes: two colluders of four name the two honest members,
// half of their plan and not more; counted against a later, smaller plan (the one left
// once a verdict took one colluder out) the same two accusations were a majority, and the
// testnet's colluder scenario ended with every member an offender and the job failed
// ("0 nodes can run the job"). A convicted member's accusations do not count at all.
//
// A member a leader's verdict convicted (Job.Verdicts: the leader re-scored the signed
// contributions a reporter shipped and dropped the member too) is an offender whatever
// the count: with two colluders of four the two honest reporters are only half of the
// plan, and the count alone cannot tell them from two liars naming two honest members.
// A verdict that did not convict changes nothing here (the false accuser is named in an
// event; see docs/security.md for why it is not excluded).
func Offenders(j Job) map[string]bool {
	out := map[string]bool{}
	for _, v := range j.Verdicts {
		if v.Convicted && v.By != "" && v.Member != "" {
			out[v.Member] = true
		}
	}
	convicted := maps.Clone(out)
	type accused struct {
		member string
		epoch  uint64
	}
	reporters := map[accused]map[string]bool{}
	for _, ev := range j.Events {
		if ev.Kind != jobspec.EventOffender || ev.By == "" || convicted[ev.By] {
			continue
		}
		m, ok := jobspec.OffenderOf(ev.Message)
		if !ok || m == ev.By {
			continue
		}
		plan := j.planOfEpoch(ev.Epoch)
		if plan == nil || !plan.Has(m) || !plan.Has(ev.By) {
			continue
		}
		k := accused{m, ev.Epoch}
		if reporters[k] == nil {
			reporters[k] = map[string]bool{}
		}
		reporters[k][ev.By] = true
		if len(reporters[k]) >= len(plan.Nodes())/2+1 {
			out[m] = true
		}
	}
	return out
}

// planOfEpoch is j's plan of epoch e: its current plan, or one of its recorded epochs'
// (Epochs); nil when j knows none.
func (j Job) planOfEpoch(e uint64) *JobPlan {
	if e == j.Epoch && j.Plan != nil {
		return j.Plan
	}
	for _, ep := range j.Epochs {
		if ep.Epoch == e {
			return ep.Plan
		}
	}
	return nil
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

// Slack an evidence holds besides weights: its header and the members' names, and per
// member the signed contribution's header and signature.
const (
	evidenceSlack          = 1 << 20
	evidenceSlackPerMember = 64 << 10
)

// EvidenceBound is the most bytes an encoded offender evidence of a job with spec s and
// members plan nodes can have: θ and one contribution per member, each at most the
// model's weights, and their headers. A leader bounds an evidence blob by it before
// fetching any of it (node/evidence_blob.go).
func EvidenceBound(s jobspec.Spec, members int) int64 {
	var weights int64
	for _, c := range ModelConfig(s).LayerCosts() {
		weights += c.ParamBytes
	}
	m := int64(members)
	return weights*(m+1) + evidenceSlack + m*evidenceSlackPerMember
}
