package scheduler

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// DecisionKind says what a Decision does.
type DecisionKind string

// Decision kinds.
const (
	// DecisionPlan commits a job's first plan and marks it running.
	DecisionPlan DecisionKind = "plan"
	// DecisionReplan commits a new epoch after a node or worker was lost.
	DecisionReplan DecisionKind = "replan"
	// DecisionRebalance commits a new epoch onto joined nodes.
	DecisionRebalance DecisionKind = "rebalance"
	// DecisionContinue commits a new epoch that drops the replicas of dead nodes, which the
	// surviving workers adopt in place: no restore, no step redone (JobPlan.Continues).
	DecisionContinue DecisionKind = "continue"
	// DecisionFail marks a job failed.
	DecisionFail DecisionKind = "fail"
	// DecisionWait keeps a job without a plan in planning while members' speed proofs
	// are pending (Member.ProofPending): it commits only the move of a submitted job to
	// planning, with its Reason as the status message.
	DecisionWait DecisionKind = "wait"
	// DecisionDecline records that growth was weighed and declined; it commits nothing.
	DecisionDecline DecisionKind = "decline"
)

// Decision is one thing the scheduler decided about one job.
type Decision struct {
	Job  string
	Kind DecisionKind
	// From is the job's status when the decision was made.
	From jobspec.JobStatus
	// Plan is the epoch to commit (plan, replan, rebalance, continue).
	Plan *JobPlan
	// Reason says why, in words: the plan's reason, the failure, the decline.
	Reason string
	// Event is the event recorded with a new epoch (replan, rebalance); Apply sets its
	// Epoch to the committed one.
	Event *Event
}

// Commits reports whether applying d writes to the control plane.
func (d Decision) Commits() bool {
	switch d.Kind {
	case DecisionDecline:
		return false
	case DecisionWait:
		return d.From == jobspec.JobSubmitted
	}
	return true
}

// Apply commits d through c and returns the epoch it committed (0 when none). A plan of a
// submitted job is preceded by its move to planning, and followed by its move to running,
// as a failure of a submitted job is preceded by planning too.
func Apply(ctx context.Context, c Committer, d Decision) (uint64, error) {
	switch d.Kind {
	case DecisionWait:
		if d.From != jobspec.JobSubmitted {
			return 0, nil
		}
		if err := c.SetJobStatus(ctx, d.Job, jobspec.JobPlanning, d.Reason); err != nil {
			return 0, fmt.Errorf("mark job %s planning: %w", d.Job, err)
		}
		return 0, nil
	case DecisionPlan:
		if err := markPlanning(ctx, c, d); err != nil {
			return 0, err
		}
		epoch, err := c.SetPlan(ctx, d.Job, *d.Plan, d.Reason)
		if err != nil {
			return 0, fmt.Errorf("commit plan of job %s: %w", d.Job, err)
		}
		if err := c.SetJobStatus(ctx, d.Job, jobspec.JobRunning, fmt.Sprintf("epoch %d: %s", epoch, d.Reason)); err != nil {
			return epoch, fmt.Errorf("mark job %s running: %w", d.Job, err)
		}
		return epoch, nil
	case DecisionReplan, DecisionRebalance:
		epoch, err := c.SetPlan(ctx, d.Job, *d.Plan, d.Reason)
		if err != nil {
			return 0, fmt.Errorf("commit %s of job %s: %w", d.Kind, d.Job, err)
		}
		ev := *d.Event
		ev.Epoch = epoch
		if err := c.AddEvent(ctx, d.Job, ev); err != nil {
			return epoch, fmt.Errorf("record %s of job %s: %w", d.Kind, d.Job, err)
		}
		return epoch, nil
	case DecisionContinue:
		epoch, err := c.SetPlan(ctx, d.Job, *d.Plan, d.Reason)
		if err != nil {
			return 0, fmt.Errorf("commit %s of job %s: %w", d.Kind, d.Job, err)
		}
		return epoch, nil
	case DecisionFail:
		if err := markPlanning(ctx, c, d); err != nil {
			return 0, err
		}
		if err := c.SetJobStatus(ctx, d.Job, jobspec.JobFailed, d.Reason); err != nil {
			return 0, fmt.Errorf("mark job %s failed: %w", d.Job, err)
		}
	}
	return 0, nil
}

// markPlanning moves a submitted job to planning; a job in any other status stays.
func markPlanning(ctx context.Context, c Committer, d Decision) error {
	if d.From != jobspec.JobSubmitted {
		return nil
	}
	if err := c.SetJobStatus(ctx, d.Job, jobspec.JobPlanning, "planning"); err != nil {
		return fmt.Errorf("mark job %s planning: %w", d.Job, err)
	}
	return nil
}
