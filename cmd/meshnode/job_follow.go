package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
)

// followInterval is how often `job status --follow` polls the node.
const followInterval = time.Second

// followUnreachable is how many polls in a row may fail (the node restarting, a leader
// election) before --follow gives up.
const followUnreachable = 30

// followJob polls job id through c until it ends, reporting new events and progress with
// rep as `testnet run` does (a progress bar on a terminal, lines otherwise, JSON lines
// with -o json). It returns the job's final detail.
func followJob(ctx context.Context, c *api.Client, id string, rep *testnetReporter) (consensus.JobDetail, error) {
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	defer rep.End()
	var last consensus.JobDetail
	failures, started := 0, false
	for {
		d, err := c.Job(ctx, id, false)
		switch {
		case err == nil:
			if !started {
				rep.Begin(d.Progress.Steps)
				started = true
			}
			last, failures = d, 0
			rep.Progress(d)
			if d.Status.Terminal() {
				return d, nil
			}
		case api.StatusCode(err) == http.StatusNotFound || ctx.Err() != nil:
			return last, jobErr(id, err)
		default:
			if failures++; failures >= followUnreachable {
				return last, fmt.Errorf("follow job %s: %d polls in a row failed (at step %d): %w", id, failures, last.Progress.Step, err)
			}
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-tick.C:
		}
	}
}

// jobEndErr is the error of a followed job that did not end done, so the command exits
// non-zero; nil for a done job.
func jobEndErr(d consensus.JobDetail) error {
	if d.Status == consensus.JobDone {
		return nil
	}
	return fmt.Errorf("job %s %s at step %d/%d%s", d.ID, d.Status, d.Progress.Step, d.Progress.Steps, d.LastEventMessage())
}
