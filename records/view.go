package records

import (
	"slices"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// The JSON shapes of the node's HTTP API and the CLI's -o json, built from FSM state.

// JobSummary is one line of `meshnode jobs -o json`.
type JobSummary struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Status      JobStatus `json:"status"`
	SubmittedAt time.Time `json:"submitted_at"`
}

// JobDetail is `meshnode job status -o json`: the job, its current plan (null before the
// first), its progress and its event log.
type JobDetail struct {
	ID           string               `json:"id"`
	Name         string               `json:"name"`
	Status       JobStatus            `json:"status"`
	Spec         jobspec.Spec         `json:"spec"`
	Plan         *PlanEpoch           `json:"plan"`
	Progress     ProgressView         `json:"progress"`
	Events       []Event              `json:"events"`
	Checkpoints  []CheckpointManifest `json:"checkpoints"`
	SubmittedAt  time.Time            `json:"submitted_at"`
	SubmittedBy  string               `json:"submitted_by,omitempty"` // the member whose live-job quota it counts against
	UpdatedAt    time.Time            `json:"updated_at"`
	AppliedIndex uint64               `json:"applied_index"`
	// Verdicts are the leaders' checks of offender evidence (Job.Verdicts): who was
	// convicted or acquitted, on whose accusation, and why.
	Verdicts []Verdict `json:"verdicts,omitempty"`
}

// ProgressView is the latest progress sample and the bounded history behind it. Before the
// engine reports anything, every number is zero and Samples is empty.
type ProgressView struct {
	Step         int     `json:"step"`
	Steps        int     `json:"steps"`
	Epoch        uint64  `json:"epoch"`
	Loss         float64 `json:"loss"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	BytesSent    uint64  `json:"bytes_sent"`
	// StepSeconds is the latest mean step time.
	StepSeconds float64 `json:"step_s"`
	// InitialValLoss and ValLoss are the first and the latest validation losses reported
	// (the untrained model's, then the newest evaluation); null before any.
	InitialValLoss *float64         `json:"initial_val_loss"`
	ValLoss        *float64         `json:"val_loss"`
	UpdatedAt      *time.Time       `json:"updated_at"`
	Samples        []ProgressSample `json:"samples"`
	// Stages are the newest phase times of each node that reported its own (StageTimes)
	// in the newest epoch any node reported in, in the order of their reports.
	Stages []StageTimes `json:"stages,omitempty"`
}

// Summary is the job's JobSummary.
func (j *Job) Summary() JobSummary {
	return JobSummary{ID: j.ID, Name: j.Name, Status: j.Status, SubmittedAt: j.SubmittedAt}
}

// Detail is the job's JobDetail as read at index.
func (j *Job) Detail(index uint64) JobDetail {
	d := JobDetail{
		ID: j.ID, Name: j.Name, Status: j.Status, Spec: j.Spec, Plan: j.CurrentPlan(),
		Events: nonNil(j.Events), Checkpoints: nonNil(j.Checkpoints), Verdicts: slices.Clone(j.Verdicts),
		SubmittedAt: j.SubmittedAt, SubmittedBy: j.SubmittedBy, UpdatedAt: j.UpdatedAt, AppliedIndex: index,
		Progress: ProgressView{Steps: j.Spec.Train.Steps, Samples: nonNil(j.Progress)},
	}
	if n := len(j.Progress); n > 0 {
		s := j.Progress[n-1]
		d.Progress.Step, d.Progress.Epoch, d.Progress.Loss = s.Step, s.Epoch, s.Loss
		d.Progress.TokensPerSec, d.Progress.BytesSent, d.Progress.UpdatedAt = s.TokensPerSec, s.BytesSent, &s.Time
		d.Progress.StepSeconds = s.StepSeconds
	}
	for i := range j.Progress {
		if v := j.Progress[i].ValLoss; v != nil {
			if d.Progress.InitialValLoss == nil {
				d.Progress.InitialValLoss = v
			}
			d.Progress.ValLoss = v
		}
	}
	d.Progress.Stages = newestStageTimes(j.StageTimes)
	return d
}

// newestStageTimes is the newest entry of each node in the newest epoch of ts.
func newestStageTimes(ts []StageTimes) []StageTimes {
	if len(ts) == 0 {
		return nil
	}
	epoch := ts[len(ts)-1].Epoch
	var out []StageTimes
	at := map[string]int{}
	for _, t := range ts {
		if t.Epoch != epoch {
			continue
		}
		if i, ok := at[t.Node]; ok {
			out[i] = t
			continue
		}
		at[t.Node] = len(out)
		out = append(out, t)
	}
	return out
}

// LastEventMessage is ": " and the newest non-empty event message, or "": what to append
// to a line saying how a job ended.
func (d JobDetail) LastEventMessage() string {
	for i := len(d.Events) - 1; i >= 0; i-- {
		if m := d.Events[i].Message; m != "" {
			return ": " + m
		}
	}
	return ""
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
