package testnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/records"
)

// recorder is a Reporter that keeps what it was told.
type recorder struct {
	mu       sync.Mutex
	lines    []string
	views    []records.JobDetail
	begun    int
	finished bool
}

func (r *recorder) Info(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}
func (r *recorder) Begin(steps int) { r.begun = steps }
func (r *recorder) End()            { r.finished = true }
func (r *recorder) Progress(job records.JobDetail) {
	r.views = append(r.views, job)
}

// scripted is a job source that answers its views in turn (the last one from then on),
// failing the reads for which fail (of the read's number) is true.
type scripted struct {
	views   []records.JobDetail
	fail    func(read int) bool
	reads   int
	served  int
	cancels []string
}

func (s *scripted) job(_ context.Context, id string) (records.JobDetail, error) {
	n := s.reads
	s.reads++
	if s.fail != nil && s.fail(n) {
		return records.JobDetail{}, errors.New("node unreachable")
	}
	v := s.views[min(s.served, len(s.views)-1)]
	s.served++
	v.ID = id
	return v, nil
}

func (s *scripted) cancel(_ context.Context, id string) error {
	s.cancels = append(s.cancels, id)
	return nil
}

func view(status jobspec.JobStatus, step int, samples ...records.ProgressSample) records.JobDetail {
	return records.JobDetail{Status: status, Progress: records.ProgressView{Step: step, Steps: 10, Samples: samples}}
}

func sample(t time.Time, step int, val float64) records.ProgressSample {
	s := records.ProgressSample{Time: t, Epoch: 1, Step: step}
	if val > 0 {
		s.ValLoss = &val
	}
	return s
}

// TestFollowReportsUntilTheJobEnds: every view is reported, a failed read is retried, and
// following stops at the terminal status with the bar begun and ended.
func TestFollowReportsUntilTheJobEnds(t *testing.T) {
	src := &scripted{views: []records.JobDetail{view(jobspec.JobRunning, 1), view(jobspec.JobRunning, 5), view(jobspec.JobDone, 10)},
		fail: func(n int) bool { return n == 1 }}
	rep := &recorder{}
	f := Follower{Job: src.job, Interval: time.Millisecond, Reporter: rep}
	job, err := f.Follow(context.Background(), "j1", 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if job.Status != jobspec.JobDone || job.ID != "j1" || len(rep.views) != 3 || rep.begun != 10 || !rep.finished {
		t.Fatalf("followed to %s after %d views (bar %d, ended %v)", job.Status, len(rep.views), rep.begun, rep.finished)
	}
}

// TestFollowGivesUpWithWhereItStopped: a job that never ends makes Follow fail after its
// timeout, naming the step reached and the last read error.
func TestFollowGivesUpWithWhereItStopped(t *testing.T) {
	src := &scripted{views: []records.JobDetail{view(jobspec.JobRunning, 7)}, fail: func(n int) bool { return n >= 3 }}
	f := Follower{Job: src.job, Interval: time.Millisecond, Reporter: &recorder{}}
	_, err := f.Follow(context.Background(), "j1", 10, 50*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "at step 7") || !strings.Contains(err.Error(), "node unreachable") {
		t.Fatalf("err = %v, want the step reached and the last read error", err)
	}
}

// TestFollowForCollectsEachSampleOnceAndCancels: samples repeated across views are kept
// once, evaluations are reported, and a job still running when the budget ends is
// cancelled.
func TestFollowForCollectsEachSampleOnceAndCancels(t *testing.T) {
	t0 := time.Now()
	a, b := sample(t0, 1, 5.5), sample(t0.Add(time.Millisecond), 2, 0)
	src := &scripted{views: []records.JobDetail{view(jobspec.JobRunning, 1, a), view(jobspec.JobRunning, 2, a, b)}}
	rep := &recorder{}
	f := Follower{Job: src.job, Cancel: src.cancel, Interval: time.Millisecond, Reporter: rep}
	job, samples, err := f.FollowFor(context.Background(), "j2", t0, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2 || samples[0].Step != 1 || samples[1].Step != 2 {
		t.Fatalf("samples %+v, want steps 1 and 2 once each", samples)
	}
	if job.Status != jobspec.JobRunning || len(src.cancels) != 1 || src.cancels[0] != "j2" {
		t.Fatalf("job %s, cancels %v: want the running job cancelled once", job.Status, src.cancels)
	}
	if len(rep.lines) != 1 || !strings.Contains(rep.lines[0], "val loss 5.5000") {
		t.Fatalf("reported %q, want the one evaluation", rep.lines)
	}
}

// TestFollowForWithoutProgressFails: a job that reports nothing within the budget is an
// error naming its status and last event; a job that ends is not cancelled.
func TestFollowForWithoutProgressFails(t *testing.T) {
	v := view(jobspec.JobFailed, 0)
	v.Events = []records.Event{{Kind: jobspec.EventStatus, Message: "no feasible plan"}}
	src := &scripted{views: []records.JobDetail{v}}
	f := Follower{Job: src.job, Cancel: src.cancel, Interval: time.Millisecond, Reporter: &recorder{}}
	_, _, err := f.FollowFor(context.Background(), "j3", time.Now(), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "status failed: no feasible plan") {
		t.Fatalf("err = %v", err)
	}
	if len(src.cancels) != 0 {
		t.Fatalf("a failed job was cancelled: %v", src.cancels)
	}
}
