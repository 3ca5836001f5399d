package balancer

// StageCompute is each plan node's predicted compute seconds per step: the forward and
// backward passes of its stage over its replica's batch, at the speed the plan's step is
// priced with (co-located nodes' shares of their host included, as PlanStep prices them),
// each pass the longer of its compute and its disk I/O. It is what a node's own measured
// compute time (parallel.StepTimes.Compute) is compared with to calibrate that node.
func StageCompute(snap Snapshot, job Job, plan Plan) (map[string]float64, error) {
	in, err := newInstance(snap, job)
	if err != nil {
		return nil, err
	}
	d, err := in.fromPlan(plan)
	if err != nil {
		return nil, err
	}
	in = in.shared(d)
	out := map[string]float64{}
	for _, r := range d.replicas {
		mr := r.micro(d.m)
		seqs := float64(r.batch) / float64(mr)
		for s, nd := range r.nodes {
			t := in.stageTimes(nd, r.bounds[s], r.bounds[s+1], r.mode(s))
			out[in.ids[nd]] = float64(mr) * t.microBatch(seqs)
		}
	}
	return out, nil
}
