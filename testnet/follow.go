package testnet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/records"
)

// Follower polls a job through the API until it ends or a time limit passes. Its reads
// are functions, so it follows a job on any cluster (a testnet reads any live node; a
// test, a fake).
type Follower struct {
	// Job reads the job's current view.
	Job func(ctx context.Context, id string) (records.JobDetail, error)
	// Cancel cancels the job (FollowFor, when the budget ends first); nil: not cancelled.
	Cancel func(ctx context.Context, id string) error
	// Interval is the time between reads; 0 means one second.
	Interval time.Duration
	// Reporter receives the progress.
	Reporter Reporter
}

func (f Follower) interval() time.Duration {
	if f.Interval <= 0 {
		return pollInterval
	}
	return f.Interval
}

// Follow reads job id until it reaches a terminal status, reporting every view; after
// timeout it gives up with an error that says the step reached and the last read error.
func (f Follower) Follow(ctx context.Context, id string, steps int, timeout time.Duration) (records.JobDetail, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f.Reporter.Begin(steps)
	defer f.Reporter.End()
	tick := time.NewTicker(f.interval())
	defer tick.Stop()
	var last records.JobDetail
	var lastErr error
	for {
		job, err := f.Job(ctx, id)
		if err == nil {
			last, lastErr = job, nil
			f.Reporter.Progress(job)
			if job.Status.Terminal() {
				return job, nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return last, fmt.Errorf("job %s not finished after %s (at step %d; last error: %v)", id, timeout, last.Progress.Step, lastErr)
			}
			return last, ctx.Err()
		case <-tick.C:
		}
	}
}

// FollowFor reads job id until budget has passed since submitted or the job ends,
// collecting its progress samples once each (the job's own history is bounded) and
// reporting each evaluation; a job still running then is cancelled. It fails when the
// job reported no progress at all.
func (f Follower) FollowFor(ctx context.Context, id string, submitted time.Time, budget time.Duration) (records.JobDetail, []records.ProgressSample, error) {
	var job records.JobDetail
	var samples []records.ProgressSample
	seen := map[[2]int]bool{}
	tick := time.NewTicker(f.interval())
	defer tick.Stop()
	for {
		if j, err := f.Job(ctx, id); err == nil {
			job = j
			for _, s := range j.Progress.Samples {
				if k := [2]int{int(s.Epoch), s.Step}; !seen[k] {
					seen[k] = true
					samples = append(samples, s)
					if s.ValLoss != nil {
						f.Reporter.Info("  %5.1f s  step %-5d val loss %.4f", s.Time.Sub(submitted).Seconds(), s.Step, *s.ValLoss)
					}
				}
			}
			if j.Status.Terminal() {
				break
			}
		}
		if time.Since(submitted) >= budget {
			break
		}
		select {
		case <-ctx.Done():
			return job, samples, ctx.Err()
		case <-tick.C:
		}
	}
	if !job.Status.Terminal() && f.Cancel != nil {
		if err := f.Cancel(ctx, id); err != nil {
			f.Reporter.Info("  cancel job %s: %v", id, err)
		}
	}
	if len(samples) == 0 {
		return job, samples, fmt.Errorf("job %s reported no progress within %s (status %s%s)", id, budget, job.Status, job.LastEventMessage())
	}
	return job, samples, nil
}
