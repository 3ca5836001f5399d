package runner

import (
	"encoding/json"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// JobView is the scheduler's view of a job of the FSM: its current plan decoded (nil when
// it has none or it does not decode), its events and checkpoints.
func JobView(j consensus.Job) scheduler.Job {
	v := scheduler.Job{ID: j.ID, Spec: j.Spec, Status: j.Status, Epoch: j.Epoch()}
	if cur := j.CurrentPlan(); cur != nil {
		var jp scheduler.JobPlan
		if json.Unmarshal(cur.Plan, &jp) == nil {
			v.Plan = &jp
		}
	}
	for _, ev := range j.Events {
		v.Events = append(v.Events, scheduler.Event{Kind: ev.Kind, Epoch: ev.Epoch, Step: ev.Step, Message: ev.Message})
	}
	for _, m := range j.Checkpoints {
		v.Checkpoints = append(v.Checkpoints, CheckpointView(m))
	}
	return v
}

// CheckpointView is the scheduler's view of a checkpoint manifest.
func CheckpointView(m consensus.CheckpointManifest) scheduler.Checkpoint {
	c := scheduler.Checkpoint{Epoch: m.Epoch, Step: m.Step}
	for _, f := range m.Files {
		c.Files = append(c.Files, scheduler.CheckpointFile{Kind: f.Kind, Node: f.Node, Layers: f.Layers, Hash: f.Hash, Replica: f.Replica})
	}
	return c
}

// JobViews are the scheduler's views of jobs.
func JobViews(jobs []consensus.Job) []scheduler.Job {
	out := make([]scheduler.Job, len(jobs))
	for i, j := range jobs {
		out[i] = JobView(j)
	}
	return out
}

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
