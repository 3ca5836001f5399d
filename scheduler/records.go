package scheduler

import (
	"encoding/json"

	"github.com/meshnode/meshnode/records"
)

// The records the control plane stores are converted to the scheduler's views here, and
// only here: the node's engine, the runner, the CLI and the testnet all read a job's plan,
// events and checkpoints through these.

// JobFromRecord is the scheduler's view of a stored job: its current plan decoded (nil
// when it has none or it does not decode), its events and checkpoints.
func JobFromRecord(j records.Job) Job {
	v := Job{ID: j.ID, Spec: j.Spec, Status: j.Status, SubmittedAt: j.SubmittedAt, Epoch: j.Epoch()}
	for i := range j.Plans {
		pe := &j.Plans[i]
		ep := EpochPlan{Epoch: pe.Epoch, SetAt: pe.SetAt, Plan: PlanFromRecord(pe)}
		v.Epochs = append(v.Epochs, ep)
		if i == len(j.Plans)-1 {
			v.Plan, v.PlanSetAt = ep.Plan, ep.SetAt
		}
	}
	for _, s := range j.Progress {
		v.Progress = append(v.Progress, Sample{Time: s.Time, Epoch: s.Epoch, Step: s.Step, StepS: s.StepSeconds})
	}
	for _, s := range j.StageTimes {
		v.StageTimes = append(v.StageTimes, StageSample{Epoch: s.Epoch, Step: s.Step, Node: s.Node, ComputeS: s.Compute})
	}
	v.Events = EventsFromRecord(j.Events)
	for _, d := range j.Verdicts {
		v.Verdicts = append(v.Verdicts, Verdict{Member: d.Member, Accuser: d.Accuser, Convicted: d.Convicted, Epoch: d.Epoch, Step: d.Step, By: d.By})
	}
	for _, m := range j.Checkpoints {
		v.Checkpoints = append(v.Checkpoints, CheckpointFromRecord(m))
	}
	return v
}

// JobsFromRecords are the scheduler's views of stored jobs.
func JobsFromRecords(jobs []records.Job) []Job {
	out := make([]Job, len(jobs))
	for i, j := range jobs {
		out[i] = JobFromRecord(j)
	}
	return out
}

// PlanFromRecord decodes a plan epoch's plan; nil for none or one that does not decode.
func PlanFromRecord(pe *records.PlanEpoch) *JobPlan {
	if pe == nil {
		return nil
	}
	var jp JobPlan
	if json.Unmarshal(pe.Plan, &jp) != nil {
		return nil
	}
	return &jp
}

// EventsFromRecord is the scheduler's view of a job's event log.
func EventsFromRecord(evs []records.Event) []Event {
	var out []Event
	for _, ev := range evs {
		out = append(out, Event{Kind: ev.Kind, Epoch: ev.Epoch, Step: ev.Step, Message: ev.Message, By: ev.By})
	}
	return out
}

// CheckpointFromRecord is the scheduler's view of a checkpoint manifest.
func CheckpointFromRecord(m records.CheckpointManifest) Checkpoint {
	c := Checkpoint{Epoch: m.Epoch, Step: m.Step}
	for _, f := range m.Files {
		c.Files = append(c.Files, CheckpointFile{Kind: f.Kind, Node: f.Node, Layers: f.Layers, Hash: f.Hash, Replica: f.Replica})
	}
	return c
}
