package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Harness is a State and a Committer over plain data, like nomad's scheduler.Harness: a
// test sets its jobs, members and clock, runs the scheduler through Process, and reads the
// decisions and commits it recorded. Commits change the harness's jobs as the control
// plane would (status, epoch and plan, events), so a test can run several rounds.
type Harness struct {
	JobList    []Job
	MemberList []Member
	SelfID     string
	Clock      time.Time

	// Decisions are every decision Process made, in order.
	Decisions []Decision
	// Commits are every write through the Committer, one line each, in order.
	Commits []string
	// FailWrites, when set, is returned by every write.
	FailWrites error
}

// Jobs implements State.
func (h *Harness) Jobs() []Job { return h.JobList }

// Members implements State.
func (h *Harness) Members() []Member { return h.MemberList }

// Self implements State.
func (h *Harness) Self() string { return h.SelfID }

// Now implements State.
func (h *Harness) Now() time.Time { return h.Clock }

// Process runs one round of s over the harness and applies its decisions through the
// harness, returning the decisions of this round.
func (h *Harness) Process(ctx context.Context, s *Scheduler) ([]Decision, error) {
	ds := s.Evaluate(h)
	h.Decisions = append(h.Decisions, ds...)
	for _, d := range ds {
		if _, err := Apply(ctx, h, d); err != nil {
			return ds, err
		}
	}
	return ds, nil
}

func (h *Harness) job(id string) (*Job, error) {
	if h.FailWrites != nil {
		return nil, h.FailWrites
	}
	for i := range h.JobList {
		if h.JobList[i].ID == id {
			return &h.JobList[i], nil
		}
	}
	return nil, fmt.Errorf("job %s not found", id)
}

// SetJobStatus implements Committer.
func (h *Harness) SetJobStatus(_ context.Context, id string, s jobspec.JobStatus, msg string) error {
	j, err := h.job(id)
	if err != nil {
		return err
	}
	j.Status = s
	h.Commits = append(h.Commits, fmt.Sprintf("status %s %s: %s", id, s, msg))
	return nil
}

// SetPlan implements Committer.
func (h *Harness) SetPlan(_ context.Context, id string, p JobPlan, reason string) (uint64, error) {
	j, err := h.job(id)
	if err != nil {
		return 0, err
	}
	j.Epoch++
	j.Plan, j.PlanSetAt = &p, h.Clock
	j.Epochs = append(j.Epochs, EpochPlan{Epoch: j.Epoch, SetAt: h.Clock, Plan: &p})
	h.Commits = append(h.Commits, fmt.Sprintf("plan %s epoch %d: %s", id, j.Epoch, reason))
	return j.Epoch, nil
}

// AddEvent implements Committer.
func (h *Harness) AddEvent(_ context.Context, id string, ev Event) error {
	j, err := h.job(id)
	if err != nil {
		return err
	}
	j.Events = append(j.Events, ev)
	h.Commits = append(h.Commits, fmt.Sprintf("event %s %s epoch %d step %d", id, ev.Kind, ev.Epoch, ev.Step))
	return nil
}
