package jobspec

import "math"

// MaxAudit bounds parallel.audit: more than a gather's members audits every one (the
// engine's parallel.MaxAudit).
const MaxAudit = 64

// validateAudit checks parallel.audit: members recomputed per checked gather, on average
// (the engine's sampled recompute, parallel/audit.go). An audit recomputes a replica's
// work from public inputs, so it needs what makes the work public: the job's own dataset
// (not data.local), no topk (an audited job's codec carries no error feedback, private
// state, and topk without it drops 99% of every update), no ZeRO (its gathers carry
// chunks), and DiLoCo or every-step sync (streaming overlaps its outer steps).
func (s Spec) validateAudit(v *validator) {
	p := s.Parallel
	switch a := p.Audit; {
	case math.IsNaN(a) || a < 0 || a > MaxAudit:
		v.addf("parallel.audit", "must be ≥ 0 and ≤ %d (members audited per gather), got %v", MaxAudit, a)
	case a == 0:
	case p.Sync != SyncDiLoCo && p.Sync != SyncEveryStep:
		v.addf("parallel.audit", "needs parallel.sync diloco or sync (streaming overlaps its outer steps with the inner ones), got %s", p.Sync)
	case p.Codec == CodecTopK:
		v.addf("parallel.audit", "needs parallel.codec none, fp16 or int8 (an audited job sends without error feedback, which topk cannot do without), got %s", p.Codec)
	case s.Memory.Zero > 0:
		v.addf("parallel.audit", "needs memory.zero 0 (ZeRO gathers gradient chunks, not whole contributions), got %d", s.Memory.Zero)
	case s.Data.Local != "":
		v.addf("parallel.audit", "needs the job's own dataset: with data.local no other member holds a replica's data to recompute its work")
	}
}
