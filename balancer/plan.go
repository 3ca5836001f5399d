package balancer

import (
	"fmt"
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// simBudget bounds the events the planner spends simulating its candidates; above it,
// candidates are compared by the closed-form estimate alone.
const simBudget = 1 << 18

// NewPlan computes a plan for job on the nodes and links of snap with the chosen strategy.
// Every plan places each layer exactly once per replica in contiguous ranges, fits every
// node's memory under the job's schedule, and is a pure function of its inputs. A strategy
// other than even never returns a plan that simulates slower than even's equal layer
// counts: if it would, even's partition is returned, with the reason saying so. Errors
// wrapping ErrInfeasible say which constraint fails and by how much.
//
// Job.Recompute decides whether stages recompute activations: never (off), always (on), or
// only when no plan fits memory without it (auto).
func NewPlan(snap Snapshot, job Job, opts Options) (Plan, error) {
	in, err := newInstance(snap, job)
	if err != nil {
		return Plan{}, err
	}
	if in.auditAuto && in.audit > 0 {
		return in.planAutoAudit(opts)
	}
	return in.planTiers(opts)
}

// plan is NewPlan on the instance as priced (with or without recomputation).
func (in *instance) plan(opts Options) (Plan, error) {
	if err := in.capacityCheck(); err != nil {
		return Plan{}, err
	}
	strategy := opts.Strategy
	if strategy == "" {
		strategy = jobspec.StrategyAuto
	}
	var d draft
	var err error
	switch strategy {
	case jobspec.StrategyEven:
		d, err = in.planEven()
	case jobspec.StrategySky:
		d, err = in.planSky()
	case jobspec.StrategyOptimal:
		d, err = in.planOptimal()
	case jobspec.StrategyAuto:
		d, err = in.planAuto(opts)
	default:
		return Plan{}, strategy.Check("strategy")
	}
	if err != nil {
		return Plan{}, err
	}
	if strategy != jobspec.StrategyEven && opts.Stages == 0 && !(opts.MaxReplicas > 1 && len(d.replicas) == opts.MaxReplicas) {
		d = in.noWorseThanEven(d)
	}
	return in.toPlan(strategy, d), nil
}

// capacityCheck fails when the model cannot fit the nodes at all: its parameters, gradients
// and optimizer state exceed all memory together, or one layer with a single one-sequence
// micro-batch in flight exceeds the largest node.
func (in *instance) capacityCheck() error {
	total, largest, at := 0.0, 0.0, 0
	for i, m := range in.mem {
		total += m
		if m > largest {
			largest, at = m, i
		}
	}
	if need := in.static[in.L]; need > total && !in.allowOffload {
		return infeasible("memory", need, total,
			"model does not fit: its parameters, gradients and optimizer state need %s but all %d nodes together have %s (short by %s); add nodes or memory, or shrink the model",
			gib(need), in.n, gib(total), gib(need-total))
	}
	for l := 0; l < in.L; l++ {
		if need := in.minNeed(l, l+1, 1, 1, in.maxReplicas()); need > largest {
			return infeasible("layer-memory", need, largest,
				"layer %d (%s) needs %s with one sequence in flight but the largest node (%s) has %s (short by %s)",
				l, in.job.Layers[l].Name, gib(need), in.ids[at], gib(largest), gib(need-largest))
		}
	}
	return nil
}

// defaultMicro is the micro-batch count even and sky use: the job's, or one sequence each.
func (in *instance) defaultMicro() int {
	if in.job.MicroBatches > 0 {
		return in.job.MicroBatches
	}
	return in.job.Batch
}

// planEven gives every node of one pipeline the same number of layers (the first L mod n
// one more), nodes by decreasing memory.
func (in *instance) planEven() (draft, error) {
	order := in.memoryOrder(in.allNodes())
	k := min(in.n, in.L)
	r := replicaDraft{batch: in.job.Batch, nodes: order[:k], bounds: []int{0}}
	for s := 0; s < k; s++ {
		size := in.L / k
		if s < in.L%k {
			size++
		}
		r.bounds = append(r.bounds, r.bounds[s]+size)
	}
	d := draft{replicas: []replicaDraft{r}, m: in.defaultMicro(), note: fmt.Sprintf("%d layers over %d nodes by decreasing memory", in.L, k)}
	d, err := in.withModes(d)
	if err != nil {
		return d, fmt.Errorf("even: %w", err)
	}
	return d, nil
}

// planSky is the Sky Computing allocation: one pipeline over all nodes by decreasing memory,
// layers split to minimise the slowest stage's compute (links ignored) under memory, then,
// among partitions with that bottleneck, the one with the least total compute.
func (in *instance) planSky() (draft, error) {
	order := in.memoryOrder(in.allNodes())
	order = order[:min(len(order), in.L)]
	// A shorter pipeline holds fewer micro-batches in flight at its front: when the whole
	// list does not fit, drop the smallest-memory nodes until it does.
	for k := len(order); k >= 1; k-- {
		p := newPipe(in, order[:k], in.job.Batch, in.defaultMicro(), false)
		stages, ok := p.skyPartition()
		if !ok {
			continue
		}
		if len(stages) < k { // tighten the in-flight bounds to the nodes actually used
			used := make([]int, len(stages))
			for i, s := range stages {
				used[i] = p.order[s.pos]
			}
			p2 := newPipe(in, used, in.job.Batch, in.defaultMicro(), false)
			if st2, ok := p2.skyPartition(); ok && in.estimateReplica(p2.toReplica(st2), p2.m).step < in.estimateReplica(p.toReplica(stages), p.m).step {
				p, stages = p2, st2
			}
		}
		return draft{replicas: []replicaDraft{p.toReplica(stages)}, m: p.m,
			note: fmt.Sprintf("compute balanced under memory over %d nodes, links ignored", len(stages))}, nil
	}
	return draft{}, in.activationError(newPipe(in, order, in.job.Batch, in.defaultMicro(), false))
}

// skyPartition is the smallest compute bottleneck, then the least total compute under it.
func (p *pipe) skyPartition() ([]stageRange, bool) {
	tau, ok := p.minTau()
	if !ok {
		return nil, false
	}
	stages, _, ok := p.minSum(tau * (1 + 1e-9))
	return stages, ok
}

// toReplica is the replica of a partition, every stage in the mode chooseStage picks for
// it with the micro-batches it really holds in flight (no more than the pipe's bound, so
// it fits in a mode no dearer than the search priced).
func (p *pipe) toReplica(stages []stageRange) replicaDraft {
	r := replicaDraft{batch: p.batch, bounds: []int{0}}
	for _, s := range stages {
		r.nodes = append(r.nodes, p.order[s.pos])
		r.bounds = append(r.bounds, s.last)
	}
	if modes, bad := p.in.tryModes(r, p.m, p.replicas, nil); bad < 0 {
		r.modes = modes
		return r
	}
	for i, s := range stages { // not reached: the exact window is within the pipe's bound
		m, _ := p.in.chooseStage(r.nodes[i], s.first, s.last, p.maxSeqs, p.infl[s.pos], p.replicas)
		r.modes = append(r.modes, m)
	}
	return r
}

// activationError explains a pipeline that fits parameters but not activations.
func (in *instance) activationError(p *pipe) error {
	need := in.static[in.L] + p.maxSeqs*in.tokens*in.saved[in.L]
	have := 0.0
	for _, v := range p.order {
		have += in.mem[v]
	}
	return infeasible("activation-memory", need, have,
		"no partition of %d layers over %d nodes fits memory with micro-batches of %g sequences under %s: the model with one micro-batch's activations needs at least %s, the nodes have %s, and the first stages hold up to %g micro-batches in flight; lower batch or context, or add memory",
		in.L, len(p.order), p.maxSeqs, in.sched, gib(need), gib(have), p.infl[0])
}

// noWorseThanEven returns even's draft when it simulates faster than d (or, where
// simulating is too costly, when it is estimated faster), unless d's work is checked by
// the audits the job asks for and even's would not be.
func (in *instance) noWorseThanEven(d draft) draft {
	even, err := in.planEven()
	if err != nil || (in.checked(d) && !in.checked(even)) { // audits asked: keepAuditable
		return d
	}
	if in.better(even, d) {
		even.note = "equal layer counts beat the strategy's own partition in simulation; " + even.note
		return even
	}
	return d
}

// better reports whether a reaches a loss sooner than b (timeToLoss), its step simulated
// when affordable, else estimated.
func (in *instance) better(a, b draft) bool {
	if simEvents(a)+simEvents(b) <= simBudget {
		return in.timeToLoss(a, in.simulate(a).Step) < in.timeToLoss(b, in.simulate(b).Step)*(1-1e-9)
	}
	return in.timeToLoss(a, in.estimateStep(a)) < in.timeToLoss(b, in.estimateStep(b))*(1-1e-9)
}

// microCandidates are the micro-batch counts auto tries for a replica of batch b: the job's
// when set; every count up to 64 on small batches; powers of two and b itself otherwise.
func (in *instance) microCandidates(b int) []int {
	if in.job.MicroBatches > 0 {
		return []int{in.job.MicroBatches}
	}
	var ms []int
	if b <= 64 {
		for m := 1; m <= b; m++ {
			ms = append(ms, m)
		}
		return ms
	}
	for m := 1; m < b; m *= 2 {
		ms = append(ms, m)
	}
	return append(ms, b)
}

// batchShares splits the job's batch over replicas in proportion to weights (largest
// remainder), each at least one sequence; ok is false when there are more replicas than
// sequences.
func batchShares(batch int, weights []float64) ([]int, bool) {
	R := len(weights)
	if batch < R {
		return nil, false
	}
	total := 0.0
	for _, w := range weights {
		total += w
	}
	shares, rem := make([]int, R), make([]float64, R)
	left := batch - R
	for i, w := range weights {
		exact := float64(batch-R) * w / total
		shares[i] = 1 + int(math.Floor(exact))
		rem[i] = exact - math.Floor(exact)
		left -= shares[i] - 1
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		shares[best]++
		rem[best] = -1
	}
	return shares, true
}
