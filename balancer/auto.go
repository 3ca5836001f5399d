package balancer

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// searchMode is how hard auto searches one pipeline.
type searchMode int

const (
	// searchQuick takes the greedy partition at the smallest bottleneck: for screening.
	searchQuick searchMode = iota
	// searchLadder runs the fill-minimising DP at a few bottlenecks above the smallest.
	searchLadder
	// searchLadderAllStarts is searchLadder over nearest-link orders from every start node.
	searchLadderAllStarts
	// searchExact runs the DP at every distinct stage cost (small instances only) and
	// improves the node order by local search.
	searchExact
)

// smallInstance says whether exact partition search and order local search are cheap.
func (in *instance) smallInstance() bool { return in.n <= 8 && in.L <= 32 }

// candidate is a draft with its estimated step.
type candidate struct {
	d   draft
	est float64
}

// planAuto is meshnode's planner. For each way of grouping nodes into replicas (one
// pipeline; the link clusters as replicas; groups of balanced speed on a uniform network)
// and each micro-batch count, it orders every replica's nodes along fast links, sizes stages
// to compute plus transfer under memory with the bottleneck search and the fill DP, and
// splits the batch over replicas by their throughput. The best candidates by the
// closed-form estimate, together with even's and sky's plans, are then judged by the
// simulator (when affordable) and the fastest is returned.
func (in *instance) planAuto(opts Options) (draft, error) {
	var cands []candidate
	var firstErr error
	for _, groups := range in.groupings(opts) {
		cs, err := in.searchGrouping(groups)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		cands = append(cands, cs...)
	}
	cands, err := in.fitsAudits(cands)
	if err != nil && firstErr == nil {
		firstErr = err
	}
	sort.SliceStable(cands, func(i, j int) bool {
		return in.timeToLoss(cands[i].d, cands[i].est) < in.timeToLoss(cands[j].d, cands[j].est)
	})
	keep := 6
	if in.smallInstance() {
		keep = 12
	}
	var stagesNote string
	if opts.Stages > 0 {
		cands, stagesNote = in.withStages(cands, opts.Stages, opts.MaxReplicas <= 1)
	}
	pool := cands[:min(len(cands), keep)]
	if opts.Stages == 0 && !in.forcedReplicas(opts, cands) {
		if in.smallInstance() {
			pool = append(pool, in.perStageCount()...)
		}
		for _, base := range []func() (draft, error){in.planEven, in.planSky} {
			if d, err := base(); err == nil {
				pool = append(pool, candidate{d: d, est: in.estimateStep(d)})
			}
		}
	}
	if len(pool) == 0 {
		if firstErr == nil {
			firstErr = in.activationError(newPipe(in, in.allNodes(), in.job.Batch, in.defaultMicro(), true))
		}
		return draft{}, firstErr
	}
	best := in.judge(pool)
	best.d.note = fmt.Sprintf("%s%s; chosen among %d candidates (%d judged by %s, time to loss: a step worth %.2f steps on the whole batch)",
		best.d.note, stagesNote, len(cands)+2, len(pool), in.judgeName(pool), in.worth(best.d))
	return best.d, nil
}

// withStages keeps the candidates whose every replica has exactly n stages, adding, when
// single pipelines may compete (no replica count above one is fixed), the best single
// pipeline of n stages (perStageCount) to those auto's groupings found. When none has n
// stages (fewer nodes can hold a layer), it keeps those with the most stages below n, and
// the note says so; candidates are ordered by time to loss.
func (in *instance) withStages(cands []candidate, n int, single bool) ([]candidate, string) {
	if single {
		for _, c := range in.perStageCount() {
			if len(c.d.replicas[0].nodes) == n {
				cands = append(cands, c)
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		return in.timeToLoss(cands[i].d, cands[i].est) < in.timeToLoss(cands[j].d, cands[j].est)
	})
	most := 0
	for _, c := range cands {
		if k, ok := uniformStages(c.d); ok && k <= n {
			most = max(most, k)
		}
	}
	var out []candidate
	for _, c := range cands {
		if k, ok := uniformStages(c.d); ok && k == most {
			out = append(out, c)
		}
	}
	if most == n {
		return out, fmt.Sprintf("; parallel.stages fixes %d stages per replica", n)
	}
	return out, fmt.Sprintf("; parallel.stages asks for %d stages per replica, but no plan of %d fits the nodes: %d", n, n, most)
}

// uniformStages is the stage count of d's replicas, false when they differ.
func uniformStages(d draft) (int, bool) {
	k := -1
	for _, r := range d.replicas {
		if k >= 0 && len(r.nodes) != k {
			return 0, false
		}
		k = len(r.nodes)
	}
	return k, k > 0
}

// forcedReplicas reports whether the job fixes a replica count above one that some
// candidate has: then only such candidates compete (groupings keeps only them), and the
// single pipelines of even, sky and the per-stage-count search stay out.
func (in *instance) forcedReplicas(opts Options, cands []candidate) bool {
	return opts.MaxReplicas > 1 && len(cands) > 0 && len(cands[0].d.replicas) == opts.MaxReplicas
}

// judge returns the candidate with the shortest time to loss (timeToLoss: step time per
// step of progress), the step simulated when the pool is cheap enough to simulate, else
// estimated. Ties keep the earlier candidate.
func (in *instance) judge(pool []candidate) candidate {
	pool = in.keepAuditable(pool)
	events := 0
	for _, c := range pool {
		events += simEvents(c.d)
	}
	best, bestT := 0, math.Inf(1)
	for i, c := range pool {
		t := c.est
		if events <= simBudget {
			t = in.simulate(c.d).Step
		}
		t = in.timeToLoss(c.d, t)
		if t < bestT*(1-1e-9) {
			best, bestT = i, t
		}
	}
	return pool[best]
}

func (in *instance) judgeName(pool []candidate) string {
	events := 0
	for _, c := range pool {
		events += simEvents(c.d)
	}
	if events <= simBudget {
		return "simulation"
	}
	return "estimate"
}

// groupings lists the replica groupings auto considers. A fixed replica count
// (Options.MaxReplicas) above one keeps only the groupings of exactly that many replicas
// when there are any, else those below it.
func (in *instance) groupings(opts Options) [][][]int {
	all := in.allGroupings(opts)
	if opts.MaxReplicas > 1 {
		var exact [][][]int
		for _, g := range all {
			if len(g) == opts.MaxReplicas {
				exact = append(exact, g)
			}
		}
		if len(exact) == 0 {
			if g := in.forcedGrouping(opts.MaxReplicas); g != nil {
				exact = append(exact, g)
			}
		}
		if len(exact) > 0 {
			return exact
		}
	}
	return all
}

// forcedGrouping makes r groups for a fixed replica count that no usual grouping has:
// the link clusters merged into r groups (each cluster, largest first, joins the group of
// least total speed, so fast links stay inside a group), or with fewer clusters than r
// the nodes snake-dealt by speed. Nil when a group cannot hold the model.
func (in *instance) forcedGrouping(r int) [][]int {
	if r > in.n || r > in.job.Batch {
		return nil
	}
	cl := in.clusters()
	g := in.snakeGroups(in.allNodes(), r)
	if len(cl) > r {
		sort.SliceStable(cl, func(i, j int) bool { return len(cl[i]) > len(cl[j]) })
		g = make([][]int, r)
		speed := make([]float64, r)
		for _, c := range cl {
			k := 0
			for i := range g {
				if speed[i] < speed[k] {
					k = i
				}
			}
			g[k] = append(g[k], c...)
			for _, v := range c {
				speed[k] += in.speed[v]
			}
		}
	}
	if !in.eachHolds(g) {
		return nil
	}
	return g
}

// allGroupings lists every grouping auto considers within the replica bound.
func (in *instance) allGroupings(opts Options) [][][]int {
	maxR := opts.MaxReplicas
	if maxR <= 0 {
		maxR = in.n
	}
	maxR = min(maxR, in.job.Batch)
	out := [][][]int{{in.allNodes()}}
	cl := in.clusters()
	if len(cl) > 1 && len(cl) <= maxR && in.eachHolds(cl) {
		out = append(out, cl)
	}
	if len(cl) > 2 && maxR >= 2 { // also two groups of whole clusters (noisy probes split a region)
		if g := in.forcedGrouping(2); g != nil {
			out = append(out, g)
		}
	}
	if len(cl) == 1 {
		for r := 2; r <= maxR && r <= in.n; r *= 2 {
			g := in.snakeGroups(in.allNodes(), r)
			if !in.eachHolds(g) {
				break
			}
			out = append(out, g)
		}
	}
	if g := in.auditableGrouping(maxR); g != nil {
		out = append(out, g)
	}
	return out
}

// eachHolds reports whether every group has the memory for the model's training state
// (each member's share under ZeRO); with offload allowed the state of a single replica
// may live on disk.
func (in *instance) eachHolds(groups [][]int) bool {
	need := in.stageStatic(0, in.L, len(groups))
	for _, g := range groups {
		have := 0.0
		for _, v := range g {
			have += in.mem[v]
		}
		if have < need && !(in.allowOffload && len(groups) < 2) {
			return false
		}
	}
	return true
}

// searchGrouping plans one replica grouping over the micro-batch counts: a quick screen of
// every count, then a full search of the best two.
func (in *instance) searchGrouping(groups [][]int) ([]candidate, error) {
	weights := make([]float64, len(groups))
	for i, g := range groups {
		for _, v := range g {
			weights[i] += in.speed[v]
		}
	}
	shares, ok := batchShares(in.job.Batch, weights)
	if !ok {
		return nil, nil
	}
	minShare := shares[0]
	for _, s := range shares {
		minShare = min(minShare, s)
	}
	screen, keep := searchQuick, 2
	if in.smallInstance() {
		screen, keep = searchLadderAllStarts, 3
	}
	var screened []candidate
	var firstErr error
	for _, m := range in.microCandidates(minShare) {
		d, est, err := in.buildGrouping(groups, shares, m, screen)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		screened = append(screened, candidate{d: d, est: est})
	}
	sort.SliceStable(screened, func(i, j int) bool { return screened[i].est < screened[j].est })
	full := searchLadder
	if in.smallInstance() {
		full = searchExact
	}
	var ms []int
	for _, c := range screened[:min(keep, len(screened))] {
		ms = append(ms, c.d.m)
	}
	if len(ms) == 0 { // nothing fit the screen: search every count in full
		ms = in.microCandidates(minShare)
	}
	out := screened
	for _, m := range ms {
		d, est, err := in.buildGrouping(groups, shares, m, full)
		if err == nil {
			out = append(out, candidate{d: d, est: est})
		}
	}
	return out, firstErr
}

// buildGrouping plans every replica of a grouping for micro-batch count m, then moves
// batch shares toward the replicas' measured throughput and keeps whichever is faster.
func (in *instance) buildGrouping(groups [][]int, shares []int, m int, mode searchMode) (draft, float64, error) {
	d, err := in.buildReplicas(groups, shares, m, mode)
	if err != nil {
		return d, 0, err
	}
	est := in.estimateStep(d)
	if len(groups) > 1 {
		weights := make([]float64, len(groups))
		for i, r := range d.replicas {
			weights[i] = float64(r.batch) / in.estimateReplica(r, m).step
		}
		if again, ok := batchShares(in.job.Batch, weights); ok {
			if d2, err := in.buildReplicas(groups, again, m, mode); err == nil {
				if est2 := in.estimateStep(d2); est2 < est {
					d, est = d2, est2
				}
			}
		}
	}
	return d, est, nil
}

func (in *instance) buildReplicas(groups [][]int, shares []int, m int, mode searchMode) (draft, error) {
	d := draft{m: m}
	for i, g := range groups {
		r, err := in.bestPipeline(g, shares[i], m, len(groups), mode)
		if err != nil {
			return d, err
		}
		d.replicas = append(d.replicas, r)
	}
	stages := 0
	for _, r := range d.replicas {
		stages += len(r.nodes)
	}
	d.note = fmt.Sprintf("%d replica(s), %d stages, %d micro-batches", len(d.replicas), stages, m)
	return d, nil
}

// bestPipeline orders nodes and partitions the layers for one of R replicas.
func (in *instance) bestPipeline(nodes []int, batch, m, R int, mode searchMode) (replicaDraft, error) {
	bytes := float64(batch) / float64(min(m, batch)) * in.tokens * in.out[0]
	nodes = in.canHoldLayer(nodes)
	if len(nodes) == 0 {
		return replicaDraft{}, in.activationError(newPipe(in, in.allNodes(), batch, m, true))
	}
	var orders [][]int
	if mode == searchExact || mode == searchLadderAllStarts {
		for _, s := range nodes {
			orders = append(orders, in.nearestOrder(nodes, s, bytes))
		}
	} else {
		orders = append(orders, in.nearestOrder(nodes, in.memoryOrder(nodes)[0], bytes))
	}
	orders = uniqueOrders(append(orders, in.memoryOrder(nodes), in.speedOrder(nodes)))
	var best replicaDraft
	bestT, bestOrder := math.Inf(1), []int(nil)
	for _, o := range orders {
		if r, t, ok := in.partitionPipe(newLinkedPipe(in, o, batch, m, R), mode); ok && t < bestT {
			best, bestT, bestOrder = r, t, o
		}
	}
	if mode == searchExact {
		if bestOrder == nil {
			bestOrder = orders[0]
		}
		best, bestT = in.localSearch(bestOrder, best, bestT, batch, m, R)
	}
	if math.IsInf(bestT, 1) {
		return best, in.activationError(newPipe(in, nodes, batch, m, true))
	}
	return best, nil
}

// localSearch improves a node order by swaps and moves until no move helps (bounded); an
// infeasible start (bestT = +Inf) accepts the first order that fits.
func (in *instance) localSearch(order []int, best replicaDraft, bestT float64, batch, m, R int) (replicaDraft, float64) {
	for iter := 0; iter < 8; iter++ {
		improved := false
		for _, o := range orderMoves(order) {
			if r, t, ok := in.partitionPipe(newLinkedPipe(in, o, batch, m, R), searchLadder); ok && t < bestT*(1-1e-9) {
				best, bestT, order, improved = r, t, o, true
			}
		}
		if !improved {
			break
		}
	}
	if r, t, ok := in.partitionPipe(newLinkedPipe(in, order, batch, m, R), searchExact); ok && t < bestT {
		best, bestT = r, t
	}
	return best, bestT
}

// partitionPipe sizes the stages of one ordered pipeline and returns the best by the
// estimate. Shorter prefixes of the order are tried too: a pipeline of fewer nodes holds
// fewer micro-batches in flight at its front and fills faster. Small instances try every
// prefix; large ones the used prefix, or halve the list while nothing fits.
func (in *instance) partitionPipe(p *pipe, mode searchMode) (replicaDraft, float64, bool) {
	kmax := min(len(p.order), in.L)
	try := func(k int) (replicaDraft, float64, bool) {
		return in.partitionOnce(newLinkedPipe(in, p.order[:k], p.batch, p.m, p.replicas), mode)
	}
	best, bestT, ok := try(kmax)
	better := func(k int) {
		if r, t, ok2 := try(k); ok2 && (!ok || t < bestT) {
			best, bestT, ok = r, t, true
		}
	}
	switch {
	case in.smallInstance():
		for k := 1; k < kmax; k++ {
			better(k)
		}
	case ok && len(best.nodes) < kmax:
		better(len(best.nodes))
	case !ok:
		for k := kmax / 2; k >= 1 && !ok; k /= 2 {
			better(k)
		}
	}
	return best, bestT, ok
}

func (in *instance) partitionOnce(p *pipe, mode searchMode) (replicaDraft, float64, bool) {
	tau, ok := p.minTau()
	if !ok {
		return replicaDraft{}, 0, false
	}
	if mode == searchQuick {
		stages, ok := p.greedy(tau * (1 + 1e-9))
		if !ok {
			return replicaDraft{}, 0, false
		}
		r := p.toReplica(stages)
		return r, in.estimateReplica(r, p.m).step, true
	}
	taus := []float64{1, 1.1, 1.3, 1.6, 2.5}
	for i := range taus {
		taus[i] *= tau * (1 + 1e-9)
	}
	if mode == searchExact {
		taus = p.tauCandidates(tau * (1 - 1e-9))
	}
	var best replicaDraft
	bestT := math.Inf(1)
	for _, t := range taus {
		stages, _, ok := p.minSum(t * (1 + 1e-12))
		if !ok {
			continue
		}
		r := p.toReplica(stages)
		if est := in.estimateReplica(r, p.m).step; est < bestT {
			best, bestT = r, est
		}
	}
	return best, bestT, bestT < math.Inf(1)
}

// canHoldLayer drops nodes that cannot hold even the lightest layer with one one-sequence
// micro-batch in flight: in a link-aware pipeline every listed node up to the last used one
// must take a stage.
func (in *instance) canHoldLayer(nodes []int) []int {
	lightest := math.Inf(1)
	for l := 0; l < in.L; l++ {
		lightest = math.Min(lightest, in.minNeed(l, l+1, 1, 1, in.maxReplicas()))
	}
	var out []int
	for _, v := range nodes {
		if in.mem[v] >= lightest {
			out = append(out, v)
		}
	}
	return out
}

// perStageCount gives the simulator a second opinion on small instances, where the
// closed form is least accurate (few micro-batches, long links): the best single pipeline
// by estimate for each stage count.
func (in *instance) perStageCount() []candidate {
	all := in.canHoldLayer(in.allNodes())
	if len(all) == 0 {
		return nil
	}
	orders := [][]int{in.memoryOrder(all), in.speedOrder(all)}
	for _, s := range all {
		orders = append(orders, in.nearestOrder(all, s, in.tokens*in.out[0]))
	}
	best := make([]candidate, min(len(all), in.L)+1)
	for _, m := range in.microCandidates(in.job.Batch) {
		for _, o := range orders {
			for k := 1; k < len(best); k++ {
				r, t, ok := in.partitionOnce(newPipe(in, o[:k], in.job.Batch, m, true), searchLadder)
				if ok && len(r.nodes) == k && (best[k].d.replicas == nil || t < best[k].est) {
					best[k] = candidate{d: draft{replicas: []replicaDraft{r}, m: m,
						note: fmt.Sprintf("1 replica(s), %d stages, %d micro-batches", k, m)}, est: t}
				}
			}
		}
	}
	var out []candidate
	for _, c := range best {
		if c.d.replicas != nil {
			out = append(out, c)
		}
	}
	return out
}

// uniqueOrders drops repeated orders, keeping the first of each.
func uniqueOrders(orders [][]int) [][]int {
	out := orders[:0]
	for _, o := range orders {
		if !slices.ContainsFunc(out, func(p []int) bool { return slices.Equal(p, o) }) {
			out = append(out, o)
		}
	}
	return out
}

// newLinkedPipe is a link-aware pipe that is one of R replicas.
func newLinkedPipe(in *instance, order []int, batch, m, R int) *pipe {
	p := newPipe(in, order, batch, m, true)
	p.replicas = R
	return p
}
