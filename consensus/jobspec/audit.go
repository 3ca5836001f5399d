package jobspec

import (
	"fmt"
	"math"
)

// MaxAudit bounds parallel.audit: more than a gather's members audits every one (the
// engine's parallel.MaxAudit).
const MaxAudit = 64

// AutoAudit is the rate "auto" resolves to where a job can be audited: one member of each
// outer step's gather drawn, on average. With three replicas, one that replays what it saw
// is drawn with probability 1/3 at each outer step (docs/security.md, "Replaying what was
// seen: audits").
const AutoAudit = 1

// validateAudit checks parallel.audit: members recomputed per checked gather, on average
// (the engine's sampled recompute, parallel/audit.go). A number above 0 is refused where
// nothing could be recomputed (auditRefusal); "auto" asks for nothing: it resolves to 0
// there (ResolvedAudit).
func (s Spec) validateAudit(v *validator) {
	if s.Parallel.Audit.IsAuto {
		return
	}
	switch a := s.Parallel.Audit.V; {
	case math.IsNaN(a) || a < 0 || a > MaxAudit:
		v.addf("parallel.audit", "must be \"auto\" or ≥ 0 and ≤ %d (members audited per gather), got %v", MaxAudit, a)
	case a == 0:
	default:
		if why := s.auditRefusal(); why != "" {
			v.addf("parallel.audit", "%s; set it to 0 or \"auto\" (which resolves to 0 for such a job)", why)
		}
	}
}

// auditRefusal says why no member could recompute another's work in this job, "" when one
// could. An audit recomputes a replica's work from public inputs, so it needs what makes
// the work public: the job's own dataset held whole by every replica (not data.local, not
// sharded), no topk (an audited job's codec carries no error feedback, private state, and
// topk without it drops 99% of every update), no ZeRO (its gathers carry chunks), and
// DiLoCo or every-step sync (streaming overlaps its outer steps).
func (s Spec) auditRefusal() string {
	p := s.Parallel
	switch {
	case p.Sync != SyncDiLoCo && p.Sync != SyncEveryStep:
		return fmt.Sprintf("needs parallel.sync diloco or sync (streaming overlaps its outer steps with the inner ones), got %s", p.Sync)
	case p.Codec == CodecTopK:
		return fmt.Sprintf("needs parallel.codec none, fp16 or int8 (an audited job sends without error feedback, which topk cannot do without), got %s", p.Codec)
	case s.Memory.Zero > 0:
		return fmt.Sprintf("needs memory.zero 0 (ZeRO gathers gradient chunks, not whole contributions), got %d", s.Memory.Zero)
	case s.Data.Local != "":
		return "needs the job's own dataset: with data.local no other member holds a replica's data to recompute its work"
	case s.Data.TrainShards > 0:
		return fmt.Sprintf("needs a dataset every replica holds whole: this one is sharded (%d training shards, each replica fetches only its own), so no other member holds a replica's data to recompute its work", s.Data.TrainShards)
	}
	return ""
}

// ResolvedAudit is the audit rate the job asks its plans for: parallel.audit when pinned;
// for "auto", AutoAudit for a DiLoCo job that can be audited (auditRefusal) with every
// weight trained (no LoRA: the engine audits only whole-model training), else 0.
// Every-step sync is not audited by auto: an audit there recomputes a member's gradient at
// every step, and a replay of a one-step gradient moves the loss little
// (docs/security.md). Whether a plan runs the audits auto asks for is the planner's
// (balancer.Plan.Audited): it does where every replica is one stage whose node can also
// hold the audit worker.
func (s Spec) ResolvedAudit() float64 {
	p := s.Parallel
	if !p.Audit.IsAuto {
		return p.Audit.V
	}
	if p.Sync != SyncDiLoCo || s.Train.LoRA != nil || s.auditRefusal() != "" {
		return 0
	}
	return AutoAudit
}
