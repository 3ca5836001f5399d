package scheduler

import (
	"fmt"
	"time"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// The straggler detector and the progress watchdog watch a running epoch's steps against
// its plan's prediction.
const (
	// StragglerRatio is how much slower than predicted an epoch's measured step time
	// (MeasureEpoch: a median over several samples) must be before it is re-planned.
	StragglerRatio = 1.5
	// WatchdogSteps is how many predicted step times a running epoch may go without a
	// progress sample before the watchdog re-plans it, and WatchdogFloor the least
	// such wait: an epoch's start (restoring, loading data, filling the pipeline) and
	// an evaluation take longer than a step.
	WatchdogSteps = 50
	WatchdogFloor = 90 * time.Second
)

// considerStraggler re-plans a running epoch whose measured step time is StragglerRatio
// or more above its prediction: the balancer weighs the current plan against a new one on
// calibrated speeds (members, already calibrated by NodeSpeeds), with its hysteresis, and
// the new epoch resumes from the newest checkpoint that live nodes hold. nil when the
// epoch is not measured yet or runs as predicted; a decline when the current plan stays
// the best or there is nothing to resume from past the step the epoch resumed from.
func (s *Scheduler) considerStraggler(j Job, members []Member, live liveness) *Decision {
	m, ok := MeasureEpoch(j, j.Epoch)
	if !ok || m.Ratio() < StragglerRatio {
		return nil
	}
	slow := fmt.Sprintf("epoch %d measured %.3g s/step over its last %d samples against %.3g s predicted (%.1f×)",
		j.Epoch, m.Measured, m.Samples, m.Predicted, m.Ratio())
	decline := func(format string, args ...any) *Decision {
		return &Decision{Job: j.ID, Kind: DecisionDecline, From: j.Status, Reason: slow + "; " + fmt.Sprintf(format, args...)}
	}
	ckpt, ok := CompleteCheckpoint(j, live.alive)
	if !ok {
		return decline("no replan: no checkpoint that live nodes hold to resume from")
	}
	if !j.Plan.Continues && ckpt.Step <= j.Plan.ResumeStep {
		// Re-planning now would redo this epoch's every step; a mis-calibrated mesh
		// that moves from node to node must still make progress between moves.
		return decline("no replan before a checkpoint past step %d, where this epoch resumed", j.Plan.ResumeStep)
	}
	in, err := planInputs(j.Spec, candidates(members), s.cfg.Compression)
	if err != nil {
		return decline("no replan: inputs: %v", err)
	}
	current, err := j.Plan.Inputs.Replan()
	if err != nil {
		return decline("no replan: the current plan does not re-derive: %v", err)
	}
	dec, err := balancer.Replan(current, in.Snapshot, in.Job, in.options())
	if err != nil {
		return decline("no replan: %v", err)
	}
	if !dec.Replan {
		return decline("on calibrated speeds: %s", dec.Reason)
	}
	next, err := jobPlanFrom(dec.Plan, in, ModelConfig(j.Spec).NumLayers(), s.cfg.CheckPlan)
	if err != nil {
		return decline("no replan: the balancer's plan does not convert: %v", err)
	}
	next.ResumeStep = ckpt.Step
	reason := fmt.Sprintf("straggler: %s; on calibrated speeds %s; resume from step %d", slow, dec.Reason, ckpt.Step)
	return &Decision{Job: j.ID, Kind: DecisionRebalance, From: j.Status, Plan: &next, Reason: reason,
		Event: &Event{Kind: jobspec.EventRebalance, Step: ckpt.Step, Message: reason}}
}

// stalled is why the watchdog re-plans j at now: its current epoch has made no progress
// (no sample, or none since the newest) for WatchdogSteps predicted step times, and at
// least WatchdogFloor, since the plan was committed or its newest sample; "" when it
// progresses.
func stalled(j Job, now time.Time) string {
	if j.Plan == nil || j.PlanSetAt.IsZero() {
		return ""
	}
	last := j.PlanSetAt
	for _, s := range j.Progress {
		// The workers of an epoch that continues the previous one in place step on.
		if (s.Epoch == j.Epoch || j.Plan.Continues) && s.Time.After(last) {
			last = s.Time
		}
	}
	wait := max(WatchdogFloor, time.Duration(WatchdogSteps*j.Plan.PredictedStepS*float64(time.Second)))
	if idle := now.Sub(last); idle > wait {
		return fmt.Sprintf("no progress in epoch %d for %s (%d predicted steps of %.3g s, at least %s)",
			j.Epoch, idle.Round(time.Second), WatchdogSteps, j.Plan.PredictedStepS, WatchdogFloor)
	}
	return ""
}
