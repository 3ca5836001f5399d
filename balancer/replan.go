package balancer

import (
	"fmt"
	"math"
)

// Decision is Replan's answer.
type Decision struct {
	// Replan is true when Plan should replace the current plan.
	Replan bool `json:"replan"`
	// Plan is the proposed plan (when Replan is false, the candidate that was not good
	// enough, for display).
	Plan   Plan   `json:"plan"`
	Reason string `json:"reason"`
	// CurrentStep and NewStep are the step times of the current plan on the new snapshot
	// (+Inf when it is infeasible) and of the proposal, simulated when affordable.
	CurrentStep float64 `json:"current_step_s"`
	NewStep     float64 `json:"new_step_s"`
	// MoveBytes is the parameter and optimizer state that must move to adopt Plan;
	// MoveSeconds is how long that takes over the links, amortised by Replan over
	// Options.MoveHorizonSteps.
	MoveBytes   float64 `json:"move_bytes"`
	MoveSeconds float64 `json:"move_s"`
}

// Replan decides whether a changed snapshot deserves a new plan. It proposes one when the
// current plan no longer fits (a node left, lost memory or speed) or when the best new plan
// is predicted faster by more than Options.Margin (default 10%) once the time to move
// layers to their new holders, amortised over Options.MoveHorizonSteps (default 100), is
// added to it. Hysteresis keeps a plan from flapping between near-equal alternatives.
func Replan(current Plan, snap Snapshot, job Job, opts Options) (Decision, error) {
	in, err := newInstance(snap, job)
	if err != nil {
		return Decision{}, err
	}
	margin, horizon := opts.Margin, float64(opts.MoveHorizonSteps)
	if margin == 0 {
		margin = 0.10
	}
	if horizon == 0 {
		horizon = 100
	}
	proposal, err := NewPlan(snap, job, opts)
	if err != nil {
		return Decision{}, err
	}
	if in.auditAuto {
		// audit auto places a job as if unaudited (planAutoAudit): the current plan and
		// the proposal are weighed so too, or the audits a new node's replica would add
		// to every step kept a job from the node (one node to two: 1.5× each replica's
		// step, no longer 10% ahead by time to loss).
		plain := *in
		plain.audit, plain.auditAuto = 0, false
		in = &plain
	}
	next, err := in.fromPlan(proposal)
	if err != nil {
		return Decision{}, fmt.Errorf("replan: %w", err)
	}
	dec := Decision{Plan: proposal, NewStep: in.judgedStep(next)}
	dec.MoveBytes, dec.MoveSeconds = in.moveCost(current, next)
	inCur := in
	cur, err := inCur.fromPlan(current)
	if err == nil {
		err = inCur.memoryCheck(cur)
	}
	if err != nil {
		dec.Replan, dec.CurrentStep = true, math.Inf(1)
		dec.Reason = "current plan is infeasible: " + err.Error()
		return dec, nil
	}
	dec.CurrentStep = inCur.judgedStep(cur)
	// Compared by time to loss (ttl.go): seconds per step of progress, 1 per step unless
	// the model shape has a measured progress model and the plans' replicas train apart.
	curTTL, newTTL := inCur.timeToLoss(cur, dec.CurrentStep), in.timeToLoss(next, dec.NewStep)
	amortised := newTTL + dec.MoveSeconds/horizon
	dec.Replan = amortised < curTTL*(1-margin)
	verdict := "keep the current plan"
	if dec.Replan {
		verdict = "replan"
	}
	dec.Reason = fmt.Sprintf("%s: current %.4g s/step, proposal %.4g s/step + %.4g s to move %s over %g steps (need < %.4g with a %.0f%% margin)",
		verdict, dec.CurrentStep, dec.NewStep, dec.MoveSeconds, gib(dec.MoveBytes), horizon, dec.CurrentStep*(1-margin), margin*100)
	if w1, w2 := inCur.worth(cur), in.worth(next); w1 != 1 || w2 != 1 {
		dec.Reason += fmt.Sprintf("; by time to loss (a step worth %.2f now, %.2f proposed): %.4g s against %.4g s", w1, w2, curTTL, amortised)
	}
	return dec, nil
}

// PlanStep is the step time of plan on snap as Replan judges a current plan: simulated
// when affordable, else the estimate (co-located nodes' shares priced either way).
func PlanStep(snap Snapshot, job Job, plan Plan) (float64, error) {
	in, err := newInstance(snap, job)
	if err != nil {
		return 0, err
	}
	d, err := in.fromPlan(plan)
	if err != nil {
		return 0, err
	}
	return in.judgedStep(d), nil
}

// judgedStep is the simulated step when affordable, else the estimate.
func (in *instance) judgedStep(d draft) float64 {
	if simEvents(d) <= simBudget {
		return in.simulate(d).Step
	}
	return in.estimateStep(d)
}

// moveCost prices adopting next: every layer a node must hold but does not hold under the
// current plan is fetched (parameters and optimizer state) from its fastest live current
// holder, or over the worst link from a checkpoint when none is live; a node receives its
// layers one after another and nodes receive in parallel.
func (in *instance) moveCost(current Plan, next draft) (bytes, seconds float64) {
	held := map[int][]int{} // layer → current live holders
	holds := map[[2]int]bool{}
	for _, rep := range current.Replicas {
		for _, st := range rep.Stages {
			v, ok := in.index[st.Node]
			for l := st.First; l < st.Last && ok && l < in.L; l++ {
				held[l] = append(held[l], v)
				holds[[2]int{v, l}] = true
			}
		}
	}
	worstBW, worstLat := math.Inf(1), 0.0
	for i, bw := range in.bw {
		if !math.IsInf(bw, 1) {
			worstBW, worstLat = math.Min(worstBW, bw), math.Max(worstLat, in.lat[i])
		}
	}
	for _, r := range next.replicas {
		for s, v := range r.nodes {
			t := 0.0
			for l := r.bounds[s]; l < r.bounds[s+1]; l++ {
				if holds[[2]int{v, l}] {
					continue
				}
				size := float64(in.job.Layers[l].ParamBytes + in.job.Layers[l].OptimizerBytes)
				bytes += size
				best := math.Inf(1)
				for _, src := range held[l] {
					bw, lat := in.link(src, v)
					best = math.Min(best, size/bw+lat)
				}
				if math.IsInf(best, 1) {
					best = size/worstBW + worstLat
					if math.IsInf(worstBW, 1) {
						best = 0 // a single node: nothing to move over
					}
				}
				t += best
			}
			seconds = math.Max(seconds, t)
		}
	}
	return bytes, seconds
}
