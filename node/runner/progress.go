package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/consensus"
)

// progressEvery bounds how often a worker commits progress between evaluations.
const progressEvery = 2 * time.Second

// maxPendingProgress bounds the samples a worker keeps while no leader takes its
// progress; past it, the failed commit fails the worker as any other error does.
const maxPendingProgress = 64

// progress collects what the reporting worker commits.
type progress struct {
	control Control
	job     string
	epoch   uint64
	report  bool // this worker commits progress (the last stage of replica 0)
	pending []consensus.ProgressSample
	last    time.Time
	steps   int // steps since the last sample
	elapsed time.Duration
	tokens  int   // tokens per step, all replicas
	traffic int64 // the latest traffic total, carried into samples between evaluations
}

// add records a sample of step and commits the pending ones when forced (evaluation
// steps) or progressEvery after the last commit; traffic < 0 keeps the last total.
func (p *progress) add(ctx context.Context, step int, loss float64, val *float64, traffic int64, force bool) error {
	if !p.report {
		return nil
	}
	if traffic >= 0 {
		p.traffic = traffic
	}
	s := consensus.ProgressSample{Time: time.Now().UTC(), Epoch: p.epoch, Step: step, Loss: loss, ValLoss: val, BytesSent: uint64(p.traffic)}
	if p.steps > 0 {
		s.StepSeconds = p.elapsed.Seconds() / float64(p.steps)
		s.TokensPerSec = float64(p.tokens*p.steps) / p.elapsed.Seconds()
	}
	if !force && time.Since(p.last) < progressEvery {
		return nil
	}
	p.pending = append(p.pending, s)
	p.steps, p.elapsed, p.last = 0, 0, time.Now()
	if err := p.control.ReportProgress(ctx, p.job, p.pending); err != nil {
		if ctx.Err() == nil && leaderChanging(err) && len(p.pending) < maxPendingProgress {
			return nil // kept: the next commit carries them
		}
		return fmt.Errorf("report progress: %w", err)
	}
	p.pending = p.pending[:0]
	return nil
}

// leaderChanging reports whether err is a write refused or lost because the Raft
// leadership is changing: progress is only a record, so training goes on and the samples
// go with the next commit, instead of failing the worker and redoing the steps since the
// last checkpoint. A sample whose lost write did commit is then recorded twice.
func leaderChanging(err error) bool {
	return errors.Is(err, consensus.ErrLeadershipLost) || errors.Is(err, consensus.ErrNotLeader) || errors.Is(err, consensus.ErrNoLeader)
}
