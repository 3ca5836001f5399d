package scheduler

import (
	"fmt"
	"time"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// considerGrowth decides whether a healthy running job moves onto nodes that joined since
// its plan: the balancer's Replan decides, with its hysteresis (the new plan must win by a
// margin after the cost of moving layers). The new epoch resumes from the latest
// checkpoint with live holders, so nothing moves before the job has one. It returns nil
// when no node joined; otherwise a rebalance or a decline with its reason.
func (s *Scheduler) considerGrowth(j Job, members []Member, live liveness) *Decision {
	planned := map[string]bool{}
	for _, n := range j.Plan.Inputs.Snapshot.Nodes {
		planned[n.ID] = true
	}
	for _, id := range j.Plan.Nodes() {
		planned[id] = true // a spare an in-place epoch put in a dead node's place joined nothing
	}
	cands := candidates(members)
	var fresh []string
	for _, cd := range cands {
		if !planned[cd.id] {
			fresh = append(fresh, cd.id)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	decline := func(format string, args ...any) *Decision {
		return &Decision{Job: j.ID, Kind: DecisionDecline, From: j.Status, Reason: fmt.Sprintf(format, args...)}
	}
	candidate := map[string]bool{}
	for _, cd := range cands {
		candidate[cd.id] = true
	}
	for _, id := range j.Plan.Nodes() {
		if !live.alive(id) || !candidate[id] {
			// A node missing its heartbeats (or, for a moment, its profile: the leader's
			// own entry once, on CI, while liveness counts the leader alive) makes the
			// running plan look infeasible; its loss is supervision's to handle (in place
			// where it can), not a move from a checkpoint onto the joined nodes.
			return decline("no growth while node %s of the plan is not alive with a profile", id)
		}
	}
	ckpt, ok := CompleteCheckpoint(j, live.alive)
	if !ok {
		return decline("no growth: no checkpoint that live nodes hold to resume from")
	}
	if ckpt.Step <= j.Plan.ResumeStep {
		// As for stragglers: calibrated speeds reorder the candidates, and a move that
		// redoes the whole epoch must not repeat before the epoch made progress.
		return decline("no growth before a checkpoint past step %d, where this epoch resumed", j.Plan.ResumeStep)
	}
	keep := map[string]bool{}
	for _, id := range j.Plan.Nodes() {
		keep[id] = true
	}
	in, err := planInputsKeeping(j.Spec, cands, keep, s.cfg.Compression)
	if err != nil {
		return decline("no growth: inputs: %v", err)
	}
	current, err := j.Plan.Inputs.Replan()
	if err != nil {
		return decline("no growth: the current plan does not re-derive: %v", err)
	}
	dec, err := balancer.Replan(current, in.Snapshot, in.Job, in.options())
	if err != nil {
		return decline("no growth: %v", err)
	}
	if !dec.Replan {
		return decline("no growth: %s", dec.Reason)
	}
	next, err := jobPlanFrom(dec.Plan, in, ModelConfig(j.Spec).NumLayers(), s.cfg.CheckPlan)
	if err != nil {
		return decline("no growth: the balancer's plan does not convert: %v", err)
	}
	next.ResumeStep = ckpt.Step
	reason := fmt.Sprintf("%d node(s) joined (%s); %s; resume from step %d", len(fresh), fresh[0], dec.Reason, ckpt.Step)
	return &Decision{Job: j.ID, Kind: DecisionRebalance, From: j.Status, Plan: &next, Reason: reason,
		Event: &Event{Kind: jobspec.EventRebalance, Step: ckpt.Step, Message: reason}}
}

// considerRebalance weighs a healthy running job, at most once per GrowthInterval: first
// against its own measured steps (considerStraggler), then against joined nodes
// (considerGrowth). nil when neither has anything to say. The first time an epoch is
// measured it is weighed at once, whatever the interval: a first plan's prediction is
// made from profiles alone, and each interval waited for it trains on that guess (the
// quick start's first epoch ran 85 of its 300 steps before its measure was looked at).
func (s *Scheduler) considerRebalance(j Job, members []Member, live liveness, now time.Time) *Decision {
	if at, ok := s.checked[j.ID]; ok && now.Sub(at) < s.cfg.GrowthInterval {
		if !s.newlyMeasured(j) {
			return nil
		}
		// Only the measure is weighed early; growth keeps its interval (weighed a few
		// seconds into a job, right after a spare joined, the plan's nodes lacked probed
		// links to it and the running plan looked infeasible: CI's spare-rebuild scenario
		// moved the job from a checkpoint before any node was killed).
		s.measured[j.ID] = j.Epoch
		return s.considerStraggler(j, members, live)
	}
	s.checked[j.ID] = now
	if _, ok := MeasureEpoch(j, j.Epoch); ok {
		s.measured[j.ID] = j.Epoch
	}
	slow := s.considerStraggler(j, members, live)
	if slow != nil && slow.Kind != DecisionDecline {
		return slow
	}
	if d := s.considerGrowth(j, members, live); d != nil {
		return d
	}
	return slow
}

// newlyMeasured says j's current epoch has a measure (MeasureEpoch) that considerRebalance
// has not weighed yet.
func (s *Scheduler) newlyMeasured(j Job) bool {
	if e, ok := s.measured[j.ID]; ok && e == j.Epoch {
		return false
	}
	_, ok := MeasureEpoch(j, j.Epoch)
	return ok
}
