package scheduler

import (
	"fmt"
	"math"
	"slices"
	"strings"
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
	// RecalibrateRatio is how far (either way) an epoch's measured step time may be from
	// its prediction before a plan that stays gets its prediction recalibrated. A first
	// plan's prediction comes from profiles alone (co-located nodes' bursts collide more
	// than their average shares say; a pipeline's fill and its first steps); recalibrated
	// once, it is the measured step time. At 1.25 a quick start whose first epoch ran
	// 1.16–1.24× its prediction kept that prediction to the end, with the evaluations on
	// top of the steps past 25%; a recalibration costs one in-place epoch (no restore, no
	// step redone).
	RecalibrateRatio = 1.15
	// WatchdogSteps is how many predicted step times a running epoch may go without a
	// progress sample before the watchdog re-plans it, and WatchdogFloor the least
	// such wait: an epoch's start (restoring, loading data, filling the pipeline) and
	// an evaluation take longer than a step.
	WatchdogSteps = 50
	WatchdogFloor = 90 * time.Second
)

// considerStraggler re-plans a running epoch whose measured step time is StragglerRatio
// or more above its prediction: the balancer weighs the current plan against a new one on
// calibrated speeds (members, already calibrated by Calibration.Apply), with its
// hysteresis, and the new epoch resumes from the newest checkpoint that live nodes hold.
// nil when the epoch is not measured yet or runs as predicted. A plan that stays (still
// the best, or nothing to resume from past the step the epoch resumed from) gets its
// prediction recalibrated instead when it is RecalibrateRatio off (recalibrate), else a
// decline that says why. An epoch that recalibrated its plan in place instead of a move
// it had no checkpoint for is weighed the same way, whatever its ratio, when its nodes'
// own compute times tell them apart (Measure.Compute): its prediction was made right, not
// its layout. One recalibrated for any other reason (within StragglerRatio, or the
// balancer kept the plan on its merits) is not: it would be weighed every growth interval
// for the rest of the job, and on a loaded host the nodes' compute times differ by
// enough, now and then, for a proposal that only reshuffles the batch shares to win by
// the margin, so a DiLoCo job whose replicas go on in place restarted from a checkpoint
// and redid steps (TestKilledReplicaRejoinsFromALivePeer: "0.9× predicted", then a
// rebalance with nothing to move).
func (s *Scheduler) considerStraggler(j Job, members []Member, live liveness) *Decision {
	m, ok := MeasureEpoch(j, j.Epoch)
	if !ok {
		return nil
	}
	if m.Ratio() >= StragglerRatio || recalibratedApart(j, m) {
		d := s.moveStraggler(j, members, live, m)
		if d.Kind != DecisionDecline {
			return d
		}
		if r := s.recalibrate(j, members, m, !canMove(j, live)); r != nil {
			return r
		}
		return d
	}
	return s.recalibrate(j, members, m, false)
}

// recalibratedApart says j's current epoch only recalibrated its plan's prediction in
// place of a move it had no checkpoint for, and its measure m priced the plan's nodes by
// their own compute times.
func recalibratedApart(j Job, m Measure) bool {
	return j.Plan.Continues && strings.HasPrefix(j.Plan.Reason, recalibratedReason) &&
		strings.HasSuffix(j.Plan.Reason, weighAgainNote) && len(m.Compute) == len(j.Plan.Nodes())
}

// canMove says whether a move of j could resume now: a checkpoint that live nodes hold,
// past the step j's epoch resumed from (moveStraggler declines without one).
func canMove(j Job, live liveness) bool {
	ckpt, ok := CompleteCheckpoint(j, live.alive)
	return ok && ckpt.Step > j.Plan.ResumeStep
}

// moveStraggler is considerStraggler's move of an epoch measured (m) StragglerRatio× or
// more slower than predicted: a rebalance, or a decline that says why not.
func (s *Scheduler) moveStraggler(j Job, members []Member, live liveness, m Measure) *Decision {
	slow := fmt.Sprintf("epoch %d measured %.3g s/step over its last %d samples against %.3g s predicted (%.1f×)",
		j.Epoch, m.Measured, m.Samples, m.Predicted, m.Ratio())
	decline := func(format string, args ...any) *Decision {
		return &Decision{Job: j.ID, Kind: DecisionDecline, From: j.Status, Reason: slow + "; " + fmt.Sprintf(format, args...)}
	}
	ckpt, ok := CompleteCheckpoint(j, live.alive)
	if !ok {
		return decline("no replan: no checkpoint that live nodes hold to resume from")
	}
	if ckpt.Step <= j.Plan.ResumeStep {
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
	if inPlace(j) && dec.MoveBytes == 0 && sameNodes(next, *j.Plan) {
		return decline("no replan: on calibrated speeds %s, but it keeps every node's layers (other batch shares or micro-batches); "+
			"the replicas go on in place, and it would restart every one from a checkpoint", dec.Reason)
	}
	next.ResumeStep = ckpt.Step
	reason := fmt.Sprintf("straggler: %s; on calibrated speeds %s; resume from step %d", slow, dec.Reason, ckpt.Step)
	return &Decision{Job: j.ID, Kind: DecisionRebalance, From: j.Status, Plan: &next, Reason: reason,
		Event: &Event{Kind: jobspec.EventRebalance, Step: ckpt.Step, Message: reason}}
}

// inPlace says j's replicas go on in place: a DiLoCo or streaming job whose epoch continues
// the running workers (a replica lost or rejoined, a recalibrated prediction). Every move
// restarts them all from a checkpoint, redoing its steps on each; the balancer's move cost
// counts only the bytes to move. A straggler move that keeps every node's layers (other
// batch shares, other micro-batches: what calibrated speeds told apart on a loaded host
// after a rejoin, TestKilledReplicaRejoinsFromALivePeer) is not worth that; one that moves
// layers off a slow node still is.
func inPlace(j Job) bool {
	sync := j.Spec.Parallel.Sync
	return j.Plan.Continues && (sync == jobspec.SyncDiLoCo || sync == jobspec.SyncStreaming)
}

// sameNodes says whether plans a and b run on the same set of nodes.
func sameNodes(a, b JobPlan) bool {
	x, y := slices.Sorted(slices.Values(a.Nodes())), slices.Sorted(slices.Values(b.Nodes()))
	return slices.Equal(x, y)
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

// recalibratedReason starts the reason of an epoch that only recalibrates its prediction,
// and weighAgainNote ends it when the recalibration stands in for a move that had no
// checkpoint to resume from: such an epoch is weighed again (recalibratedApart).
const (
	recalibratedReason = "recalibrated: "
	weighAgainNote     = "; weighed again once a checkpoint allows a move"
)

// recalibrate corrects the prediction of a plan that stays when its measure m is more than
// RecalibrateRatio off: a new epoch that continues the current one in place (the same
// replicas and resume step, no restore, no step redone: JobPlan.Continues) with the step time the balancer
// predicts for it on calibrated speeds (members) over the links it was planned on (each
// hand-off m.Handoff slower, when the nodes' own compute times left one), those
// the calibration priced it with (links probed while the plan's own traffic and compute
// load the machine read slower, and would be counted on top of what the speeds absorbed). It does so once: not for an epoch that is
// itself a recalibration. blocked says it stands in for a move that had no checkpoint to
// resume from (its reason then ends with weighAgainNote). nil when nothing is to be done.
func (s *Scheduler) recalibrate(j Job, members []Member, m Measure, blocked bool) *Decision {
	if r := m.Ratio(); r < RecalibrateRatio && r > 1/RecalibrateRatio {
		return nil
	}
	if j.Plan.Continues && strings.HasPrefix(j.Plan.Reason, recalibratedReason) {
		return nil
	}
	// The plan's own nodes are kept in the inputs: where the spec bounds the nodes, a spare
	// profiled faster than a calibrated plan node would cut it, and the plan would go
	// without its corrected prediction.
	keep := map[string]bool{}
	for _, id := range j.Plan.Nodes() {
		keep[id] = true
	}
	in, err := planInputsKeeping(j.Spec, candidates(members), keep, s.cfg.Compression)
	if err != nil {
		return nil
	}
	speeds := map[string]float64{}
	for _, n := range in.Snapshot.Nodes {
		if j.Plan.Has(n.ID) {
			speeds[n.ID] = n.GFLOPS
		}
	}
	if len(speeds) != len(j.Plan.Nodes()) {
		return nil // a node of the plan is no candidate now: the plan does not stay
	}
	step, ok := j.Plan.priceAtHandoff(speeds, m.Handoff)
	if !ok || math.IsInf(step, 0) || step <= 0 {
		return nil
	}
	next := *j.Plan
	// The inputs stay those the plan was derived from: anyone can still re-derive it.
	// ResumeStep stays: nothing restores from it in place, and it still tells where the
	// workers' state came from (the moves' guard reads it).
	next.Built, next.Slots = j.Plan.built(j.Epoch)
	// Rejoin stays: a rejoining node that had not started yet still joins this epoch.
	next.Continues = true
	next.PredictedStepS, next.PredictedGFLOPS = step, speeds
	next.Reason = fmt.Sprintf("%sepoch %d measured %.3g s/step against %.3g s predicted; the same plan on calibrated speeds predicts %.3g s",
		recalibratedReason, j.Epoch, m.Measured, m.Predicted, step)
	if blocked {
		next.Reason += weighAgainNote
	}
	return &Decision{Job: j.ID, Kind: DecisionContinue, From: j.Status, Plan: &next, Reason: next.Reason}
}
