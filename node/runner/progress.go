package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
)

// progressEvery bounds how often a worker commits progress between evaluations.
const progressEvery = 2 * time.Second

// An epoch's first progressEarlySamples samples and phase-time entries are committed every
// progressEarly (phase times: every max(progressEarly, members × stagesEarlyPerMember)):
// the leader calibrates a plan's prediction from its warm-up plus a few samples past it
// (scheduler.MeasureEpoch), and a first plan, priced from profiles alone, trains on its
// guess until then (at the 2 s cadence the quick start's first epoch took 85 of its 300
// steps to be measured). Together a plan's members then write at most eight phase-time
// reports a second (two later), for their first eight reports of an epoch, and the
// reporting worker two samples a second for its first eight.
const (
	progressEarly        = 500 * time.Millisecond
	progressEarlySamples = 8
	stagesEarlyPerMember = 125 * time.Millisecond
)

// maxPendingProgress bounds the samples a worker keeps while no leader takes its
// progress; past it, the failed commit fails the worker as any other error does.
const maxPendingProgress = 64

// stagesEveryPerMember is how often, per node of the plan, the plan's members together
// report their phase times: a member reports its own every max(progressEvery, members ×
// stagesEveryPerMember), so a plan of any size adds at most two Raft writes a second.
const stagesEveryPerMember = 500 * time.Millisecond

// maxPendingStages bounds the phase times a member holds while its reports fail (the
// control plane's bound on one report is larger).
const maxPendingStages = 8

// progress collects what a worker commits: the reporting worker's progress samples, and
// every worker's own phase times.
type progress struct {
	control Control
	job     string
	self    string // this node, named in its phase times (the leader stamps them anyway)
	epoch   uint64
	report  bool // this worker commits progress (the last stage of replica 0)
	members int  // the plan's nodes, which pace the phase times' reports
	pending []consensus.ProgressSample
	last    time.Time
	samples int // samples committed (or kept pending) in this epoch
	steps   int // steps since the last sample
	elapsed time.Duration
	tokens  int   // tokens per step, all replicas
	traffic int64 // the latest traffic total, carried into samples between evaluations

	phases        parallel.StepTimes // summed over phaseSteps steps since the last entry
	phaseSteps    int
	lastStages    time.Time
	stageEntries  int // phase-time entries taken in this epoch
	pendingStages []consensus.StageTimes
}

// step records one step of this worker: its wall time and phase times.
func (p *progress) step(wall time.Duration, t parallel.StepTimes) {
	p.steps++
	p.elapsed += wall
	p.phaseSteps++
	p.phases.Compute += t.Compute
	p.phases.Transfer += t.Transfer
	p.phases.Bubble += t.Bubble
	p.phases.Sync += t.Sync
}

// stagesEvery is how often this worker reports its phase times.
func (p *progress) stagesEvery() time.Duration {
	if p.stageEntries < progressEarlySamples {
		return max(progressEarly, time.Duration(p.members)*stagesEarlyPerMember)
	}
	return max(progressEvery, time.Duration(p.members)*stagesEveryPerMember)
}

// every is how often this worker commits progress samples.
func (p *progress) every() time.Duration {
	if p.samples < progressEarlySamples {
		return progressEarly
	}
	return progressEvery
}

// takeStages moves the phase times since the last entry into a pending entry for step,
// when forced (evaluation steps) or once stagesEvery has passed since the last one.
func (p *progress) takeStages(step int, force bool) {
	if p.phaseSteps == 0 || !force && time.Since(p.lastStages) < p.stagesEvery() {
		return
	}
	n := float64(p.phaseSteps)
	e := consensus.StageTimes{Time: time.Now().UTC(), Epoch: p.epoch, Step: step, Node: p.self, Steps: p.phaseSteps,
		Compute: p.phases.Compute.Seconds() / n, Transfer: p.phases.Transfer.Seconds() / n,
		Bubble: p.phases.Bubble.Seconds() / n, Sync: p.phases.Sync.Seconds() / n}
	if len(p.pendingStages) == maxPendingStages {
		p.pendingStages = p.pendingStages[1:]
	}
	p.pendingStages = append(p.pendingStages, e)
	p.phases, p.phaseSteps, p.lastStages = parallel.StepTimes{}, 0, time.Now()
	p.stageEntries++
}

// add records a sample of step and commits the pending ones when forced (evaluation
// steps) or progressEvery after the last commit; traffic < 0 keeps the last total. A
// worker that does not report progress commits its phase times alone.
func (p *progress) add(ctx context.Context, step int, loss float64, val *float64, traffic int64, force bool) error {
	p.takeStages(step, force)
	if !p.report {
		return p.commitStages(ctx)
	}
	if traffic >= 0 {
		p.traffic = traffic
	}
	s := consensus.ProgressSample{Time: time.Now().UTC(), Epoch: p.epoch, Step: step, Loss: loss, ValLoss: val, BytesSent: uint64(p.traffic)}
	if p.steps > 0 {
		s.StepSeconds = p.elapsed.Seconds() / float64(p.steps)
		s.TokensPerSec = float64(p.tokens*p.steps) / p.elapsed.Seconds()
	}
	if !force && time.Since(p.last) < p.every() {
		return nil
	}
	p.pending = append(p.pending, s)
	p.steps, p.elapsed, p.last = 0, 0, time.Now()
	p.samples++
	if err := p.control.ReportProgress(ctx, p.job, p.pending, p.pendingStages); err != nil {
		if ctx.Err() == nil && leaderChanging(err) && len(p.pending) < maxPendingProgress {
			return nil // kept: the next commit carries them
		}
		return fmt.Errorf("report progress: %w", err)
	}
	p.pending, p.pendingStages = p.pending[:0], p.pendingStages[:0]
	return nil
}

// commitStages commits the pending phase times of a worker that reports no progress. A
// failure is not the training's: the entries stay pending (bounded) for the next try.
func (p *progress) commitStages(ctx context.Context) error {
	if len(p.pendingStages) == 0 {
		return nil
	}
	if p.control.ReportProgress(ctx, p.job, nil, p.pendingStages) == nil {
		p.pendingStages = p.pendingStages[:0]
	}
	return nil
}

// leaderChanging reports whether err is a write refused or lost because the Raft
// leadership is changing: progress is only a record, so training goes on and the samples
// go with the next commit, instead of failing the worker and redoing the steps since the
// last checkpoint. A sample whose lost write did commit is then recorded twice.
func leaderChanging(err error) bool {
	return errors.Is(err, consensus.ErrLeadershipLost) || errors.Is(err, consensus.ErrNotLeader) || errors.Is(err, consensus.ErrNoLeader)
}
