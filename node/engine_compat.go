package node

import (
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/node/runner"
	"github.com/meshnode/meshnode/scheduler"
)

// JobPlan is what the leader commits for a job epoch (scheduler.JobPlan): the `plan` of
// GET /v1/jobs/{id}.
type JobPlan = scheduler.JobPlan

// PlanInputs are the balancer's inputs of a committed plan (scheduler.PlanInputs).
type PlanInputs = scheduler.PlanInputs

// StepsRedone is how many steps each new epoch of a job repeated, keyed by the new epoch
// (scheduler.StepsRedone over the job's events).
func StepsRedone(events []consensus.Event) map[uint64]int {
	return scheduler.StepsRedone(runner.JobView(consensus.Job{Events: events}).Events)
}

// CheckpointSurvives reports whether m's files, counting only those with a holder for which
// live says true (nil: all), hold every one of numLayers layers, weights and moments: a job
// can resume from it (scheduler.CheckpointSurvives).
func CheckpointSurvives(m consensus.CheckpointManifest, numLayers int, live func(node string) bool) bool {
	return scheduler.CheckpointSurvives(runner.CheckpointView(m), numLayers, live)
}
