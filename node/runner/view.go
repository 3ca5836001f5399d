package runner

import (
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// JobView is the scheduler's view of a job of the FSM (scheduler.JobFromRecord).
func JobView(j consensus.Job) scheduler.Job { return scheduler.JobFromRecord(j) }

// CheckpointView is the scheduler's view of a checkpoint manifest.
func CheckpointView(m consensus.CheckpointManifest) scheduler.Checkpoint {
	return scheduler.CheckpointFromRecord(m)
}

// JobViews are the scheduler's views of jobs.
func JobViews(jobs []consensus.Job) []scheduler.Job { return scheduler.JobsFromRecords(jobs) }

// completeCheckpoint is the job's latest checkpoint that holders for which live says true
// (nil: all) hold whole.
func completeCheckpoint(j consensus.Job, live func(string) bool) (consensus.CheckpointManifest, bool) {
	m, ok := scheduler.CompleteCheckpoint(JobView(j), live)
	if !ok {
		return consensus.CheckpointManifest{}, false
	}
	for _, c := range j.Checkpoints {
		if c.Epoch == m.Epoch && c.Step == m.Step {
			return c, true
		}
	}
	return consensus.CheckpointManifest{}, false
}

// EnginePlan is the plan the workers of an epoch run.
func EnginePlan(p scheduler.JobPlan) parallel.Plan {
	return parallel.Plan{Replicas: p.Replicas, Batches: p.Batches}
}
