package runner

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
)

// flakyControl is a Control whose ReportProgress fails with the errors of fail in turn,
// then succeeds, recording the samples of each successful commit.
type flakyControl struct {
	Control
	fail      []error
	committed [][]consensus.ProgressSample
}

func (c *flakyControl) ReportProgress(_ context.Context, _ string, s []consensus.ProgressSample, _ []consensus.StageTimes) error {
	if len(c.fail) > 0 {
		err := c.fail[0]
		c.fail = c.fail[1:]
		return err
	}
	c.committed = append(c.committed, append([]consensus.ProgressSample(nil), s...))
	return nil
}

// TestProgressOutlivesALeaderChange checks that a progress commit lost to a leadership
// change does not fail the worker (a 2-node testnet job restarted from step 0 after one)
// and that its samples go with the next commit, while other errors still fail it.
func TestProgressOutlivesALeaderChange(t *testing.T) {
	c := &flakyControl{fail: []error{consensus.ErrLeadershipLost, consensus.ErrNoLeader}}
	p := &progress{control: c, job: "j", epoch: 1, report: true, tokens: 8}
	val := 2.5
	for step := 1; step <= 3; step++ {
		if err := p.add(context.Background(), step, 3.0, &val, -1, true); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	if len(c.committed) != 1 || len(c.committed[0]) != 3 {
		t.Fatalf("commits %v, want one of the 3 samples", c.committed)
	}
	for i, s := range c.committed[0] {
		if s.Step != i+1 {
			t.Fatalf("sample %d is step %d", i, s.Step)
		}
	}
	boom := errors.New("boom")
	c.fail = []error{boom}
	if err := p.add(context.Background(), 4, 3.0, nil, -1, true); !errors.Is(err, boom) {
		t.Fatalf("another error: got %v, want it returned", err)
	}
	c.fail = make([]error, maxPendingProgress+1)
	for i := range c.fail {
		c.fail[i] = consensus.ErrNoLeader
	}
	var err error
	for step := 5; err == nil && step < 5+2*maxPendingProgress; step++ {
		err = p.add(context.Background(), step, 3.0, nil, -1, true)
	}
	if !errors.Is(err, consensus.ErrNoLeader) {
		t.Fatalf("no leader for %d samples: got %v, want the worker failed", maxPendingProgress, err)
	}
}

// TestEpochStartsWithBriskSamples: an epoch's first progressEarlySamples samples are
// committed progressEarly apart, so the leader measures a fresh plan a few seconds into
// it; later ones keep the progressEvery cadence.
func TestEpochStartsWithBriskSamples(t *testing.T) {
	c := &flakyControl{}
	p := &progress{control: c, job: "j", epoch: 1, report: true, tokens: 8, members: 2}
	for step := 1; step <= progressEarlySamples; step++ {
		p.last = time.Now().Add(-progressEarly - 100*time.Millisecond) // the last commit was progressEarly ago
		p.lastStages = p.last
		p.step(time.Millisecond, parallel.StepTimes{Compute: time.Millisecond})
		if err := p.add(context.Background(), step, 3.0, nil, -1, false); err != nil {
			t.Fatal(err)
		}
		if len(c.committed) != step {
			t.Fatalf("sample %d, %v after the last: %d commits, want %d", step, progressEarly, len(c.committed), step)
		}
	}
	if p.stageEntries != progressEarlySamples {
		t.Errorf("%d phase-time entries, want %d at the early cadence", p.stageEntries, progressEarlySamples)
	}
	p.last = time.Now().Add(-progressEarly - 100*time.Millisecond)
	p.step(time.Millisecond, parallel.StepTimes{})
	if err := p.add(context.Background(), progressEarlySamples+1, 3.0, nil, -1, false); err != nil {
		t.Fatal(err)
	}
	if len(c.committed) != progressEarlySamples {
		t.Errorf("past the early samples, %v after the last: committed, want the %v cadence", progressEarly, progressEvery)
	}
}
