package balancer

import (
	"fmt"
	"math"
)

// A job with parallel.audit has each gather's members drawn, every one with probability
// p = min(1, audit/R) over the R replicas, and every other member recomputes each drawn
// member's work since the last gather from the same starting weights (parallel/audit.go):
// one replica's steps, on the auditor's own speed. Per step, replica i then spends, on
// average,
//
//	p · Σ_{j≠i} compute_i · batch_j / batch_i
//
// recomputing: its own compute per step scaled to each other replica's share of the batch.
// The outer step waits for the slowest member, so that cost adds to each replica's step
// before the maximum. It is the expectation; a gather that draws more members than
// average takes longer, one that draws none is a plain gather. Without this the planner
// predicted an audited job's steps as if nobody recomputed anything: 1.4× fast at audit 1
// on three replicas, enough for the straggler detector to take every node for slow.

// audited says whether the engine audits d's gathers: audit asked for, two replicas or
// more, each one stage held whole in memory (no offload); for "auto" (auditAuto), only
// where every node also holds its audit worker.
func (in *instance) audited(d draft) bool {
	return in.auditShape(d) && (!in.auditAuto || in.auditFits(d))
}

// auditShape says whether d's replicas are what the engine audits, audit asked for.
func (in *instance) auditShape(d draft) bool {
	if !(in.audit > 0) || len(d.replicas) < 2 {
		return false
	}
	for _, r := range d.replicas {
		if len(r.nodes) != 1 || r.mode(0).offload > 0 {
			return false
		}
	}
	return true
}

// auditFits says whether every node of d, a draft of auditShape, holds its stage and its
// audit worker.
func (in *instance) auditFits(d draft) bool {
	R := len(d.replicas)
	for i, r := range d.replicas {
		nd, mr := r.nodes[0], r.micro(d.m)
		maxSeqs := math.Ceil(float64(r.batch) / float64(mr))
		need := in.stageMemory(0, in.L, maxSeqs, float64(inflight(in.sched, mr, 1, 0)), R, r.mode(0).recompute, 0) + in.auditWorker(d, i)
		if need > in.mem[nd]*(1+1e-12) {
			return false
		}
	}
	return true
}

// planAutoAudit is NewPlan for parallel.audit "auto": the plan the job gets unaudited,
// among candidates that include every node a replica of its own (auditableGrouping, which
// the usual groupings miss on three nodes), audited where it can be (audited), its step
// and memory then priced with the audits. It does not trade speed for audits as a pinned
// rate does (keepAuditable): the job goes where it trains fastest unaudited, and a plan
// its nodes cannot audit runs without them.
func (in *instance) planAutoAudit(opts Options) (Plan, error) {
	plain := *in
	plain.audit, plain.auditAuto, plain.everyNodeGrouping = 0, false, true
	p, err := plain.planTiers(opts)
	if err != nil {
		return p, err
	}
	d, err := in.fromPlan(p)
	if err != nil || !in.audited(d) {
		return p, err
	}
	q := in.toPlan(p.Strategy, d)
	q.Reason = p.Reason + fmt.Sprintf("; audited (parallel.audit auto: %g member per outer step recomputed, %.3g s/step)", in.audit, q.Predicted.Audit)
	return q, nil
}

// auditTimes is, per replica of d, the expected recompute time per step (above), given
// each replica's compute per step; nil when d is not audited.
func (in *instance) auditTimes(d draft, compute []float64) []float64 {
	if !in.audited(d) {
		return nil
	}
	R := len(d.replicas)
	p := min(1, in.audit/float64(R))
	total := 0
	for _, r := range d.replicas {
		total += r.batch
	}
	out := make([]float64, R)
	for i, r := range d.replicas {
		if r.batch > 0 {
			out[i] = p * compute[i] * float64(total-r.batch) / float64(r.batch)
		}
	}
	return out
}

// auditMemory is the memory replica i's node spends on its audit worker in an audited
// draft (parallel's Worker.auditWorker, kept for the run): the whole model's training state
// a second time, one resident stage with nobody to synchronise with, and the activations
// of a micro-batch of the largest other replica's share, none recomputed. 0 when d is not
// audited. Without it the planner put audited replicas on nodes that hold one copy of the
// model and not two.
func (in *instance) auditMemory(d draft, i int) float64 {
	if !in.audited(d) {
		return 0
	}
	return in.auditWorker(d, i)
}

// auditWorker is the memory of replica i's audit worker in d (auditMemory).
func (in *instance) auditWorker(d draft, i int) float64 {
	batch := 0
	for j, r := range d.replicas {
		if j != i {
			batch = max(batch, r.batch)
		}
	}
	if batch == 0 {
		return 0
	}
	mr := min(d.m, batch)
	seqs := math.Ceil(float64(batch) / float64(mr))
	return in.stageStatic(0, in.L, 1) + in.activations(0, in.L, seqs, float64(inflight(in.sched, mr, 1, 0)), false)
}

// fitsAudits drops from cands the audited drafts whose nodes cannot also hold their audit
// worker (memoryCheck), returning the first such error: the engine audits every plan of
// one-stage replicas of a job that asks for it, so such a plan would overrun its nodes.
func (in *instance) fitsAudits(cands []candidate) ([]candidate, error) {
	if !(in.audit > 0) {
		return cands, nil
	}
	var firstErr error
	out := cands[:0]
	for _, c := range cands {
		if in.audited(c.d) {
			if err := in.memoryCheck(c.d); err != nil {
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
		}
		out = append(out, c)
	}
	return out, firstErr
}

// keepAuditable is pool without the candidates whose work nobody would check when the job
// asks for audits and some candidate's would be: replicas the engine audits (audited), or
// one node alone, which has nobody to lie to. Priced with their recompute, audited
// replicas lose to a pipeline whose stages nobody recomputes (a mixed plan of a pipeline
// and a one-stage replica on three equal nodes, TestAuditedJobKeepsAuditablePlans): the
// planner must not trade the check the job asked for against speed.
func (in *instance) keepAuditable(pool []candidate) []candidate {
	if !(in.audit > 0) {
		return pool
	}
	var kept []candidate
	for _, c := range pool {
		if in.checked(c.d) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		return pool
	}
	return kept
}

// auditableGrouping is, for a job that asks for audits (or audit auto's unaudited choice,
// everyNodeGrouping), every node a replica of its own when each holds the model and maxR
// allows that many (the groupings auto otherwise considers double the replica count, so
// three nodes never got three one-stage replicas); nil otherwise, or when that grouping
// is already a usual one (a power of two).
func (in *instance) auditableGrouping(maxR int) [][]int {
	if !(in.audit > 0 || in.everyNodeGrouping) || in.n < 2 || in.n > maxR || in.n&(in.n-1) == 0 {
		return nil
	}
	g := make([][]int, in.n)
	for i := range g {
		g[i] = []int{i}
	}
	if !in.eachHolds(g) {
		return nil
	}
	return g
}

// checked says whether d's work is checked as a job asking for audits wants: its replicas
// audited, or one node alone. Always true for a job without audits.
func (in *instance) checked(d draft) bool {
	return !(in.audit > 0) || in.audited(d) || (len(d.replicas) == 1 && len(d.replicas[0].nodes) == 1)
}
