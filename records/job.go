package records

import (
	"encoding/json"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// JobStatus is where a job is in its life (jobspec.JobStatus, shared with the scheduler).
type JobStatus = jobspec.JobStatus

// EventKind names a kind of line in a job's event log (jobspec.EventKind).
type EventKind = jobspec.EventKind

// PlanEpoch is one plan the leader committed for a job. The plan itself is the balancer's
// JSON, kept opaque here.
type PlanEpoch struct {
	Epoch  uint64          `json:"epoch"`
	Plan   json.RawMessage `json:"plan"`
	Reason string          `json:"reason,omitempty"`
	SetAt  time.Time       `json:"set_at"`
}

// ProgressSample is one report of a job's training progress.
type ProgressSample struct {
	Time         time.Time `json:"time"`
	Epoch        uint64    `json:"epoch"`
	Step         int       `json:"step"`
	Loss         float64   `json:"loss"`
	TokensPerSec float64   `json:"tokens_per_sec"`
	BytesSent    uint64    `json:"bytes_sent"`
	// ValLoss is the validation loss at Step, on evaluation steps only (step 0: the
	// untrained model's).
	ValLoss *float64 `json:"val_loss,omitempty"`
	// StepSeconds is the mean wall time of the steps since the previous sample.
	StepSeconds float64 `json:"step_s,omitempty"`
}

// StageTimes is one plan member's own step phase times (parallel.StepTimes): the means
// over its Steps steps since its previous report, in seconds. Every node of a plan reports
// them, so the time a step spends is attributed to the stage that spent it.
type StageTimes struct {
	Time  time.Time `json:"time"`
	Epoch uint64    `json:"epoch"`
	Step  int       `json:"step"` // the newest step the means cover
	// Node is the member that reported them, as the leader authenticated it (it overwrites
	// whatever the sender put).
	Node     string  `json:"node"`
	Steps    int     `json:"steps"`
	Compute  float64 `json:"compute_s"`
	Transfer float64 `json:"transfer_s"`
	Bubble   float64 `json:"bubble_s"`
	Sync     float64 `json:"sync_s"`
}

// CheckpointFile is one stage's file of a checkpoint, addressed by content hash.
type CheckpointFile struct {
	// Kind is "model" (the layers' weights, GPT-2 names) or "optimizer" (their AdamW
	// moments, the companion file).
	Kind   string `json:"kind,omitempty"`
	Node   string `json:"node"`
	Layers [2]int `json:"layers"` // [first, last] layer index held in the file
	Hash   string `json:"hash"`
	Bytes  int64  `json:"bytes"`
	// Replica is the plan replica whose worker wrote the file. Weights agree across
	// replicas at a checkpoint; DiLoCo's inner optimizer moments are each replica's own.
	Replica int `json:"replica,omitempty"`
}

// CheckpointManifest lists the files that together make one checkpoint.
type CheckpointManifest struct {
	Epoch uint64           `json:"epoch"`
	Step  int              `json:"step"`
	Time  time.Time        `json:"time"`
	Files []CheckpointFile `json:"files"`
}

// Event is one line of a job's event log.
type Event struct {
	Time    time.Time `json:"time"`
	Kind    EventKind `json:"kind"`
	Epoch   uint64    `json:"epoch"`
	Step    int       `json:"step"`
	Message string    `json:"message"`
	// By is the member that recorded the event, as the leader authenticated it (it
	// overwrites whatever the sender put); empty for events of older logs.
	By string `json:"by,omitempty"`
}

// Verdict is a leader's check of the evidence a reporter shipped against Member: the
// leader verified every author's signature and recomputed the reporter's dropping
// decision from the signed contributions (parallel.VerifyEvidence). Convicted: the
// recomputation dropped Member. Otherwise the evidence did not hold and the verdict
// records Accuser's false accusation.
type Verdict struct {
	Member    string `json:"member"`
	Accuser   string `json:"accuser"`
	Convicted bool   `json:"convicted"`
	Epoch     uint64 `json:"epoch"`
	Step      int    `json:"step"`
	Reason    string `json:"reason,omitempty"`
	// By is the leader that checked the evidence, Time when.
	By   string    `json:"by"`
	Time time.Time `json:"time"`
}

// Job is one submitted job and everything the control plane knows about it.
type Job struct {
	ID          string           `json:"id"`
	Name        string           `json:"name"`
	Spec        jobspec.Spec     `json:"spec"`
	Status      JobStatus        `json:"status"`
	SubmittedAt time.Time        `json:"submitted_at"`
	SubmittedBy string           `json:"submitted_by,omitempty"` // the member that submitted it, whose live-job quota it counts against ("" before quotas)
	UpdatedAt   time.Time        `json:"updated_at"`
	Plans       []PlanEpoch      `json:"plans"`
	Progress    []ProgressSample `json:"progress"`
	// StageTimes are the plan members' phase times, oldest first (a bounded history).
	StageTimes  []StageTimes         `json:"stage_times,omitempty"`
	Checkpoints []CheckpointManifest `json:"checkpoints"`
	Events      []Event              `json:"events"`
	// Verdicts are the leaders' checks of offender evidence (Verdict), oldest first (a
	// bounded history). Only a leader writes one; the scheduler excludes a member a
	// verdict convicted even where fewer than half of the plan named it.
	Verdicts []Verdict `json:"verdicts,omitempty"`
	// FinishedIndex is the log index at which the job reached a terminal status, 0 while
	// it runs; retention drops the finished jobs with the smallest first.
	FinishedIndex uint64 `json:"finished_index,omitempty"`
}

// CurrentPlan is the newest plan epoch, or nil before the first plan.
func (j *Job) CurrentPlan() *PlanEpoch {
	if len(j.Plans) == 0 {
		return nil
	}
	return &j.Plans[len(j.Plans)-1]
}

// Epoch is the current plan epoch, 0 before the first plan.
func (j *Job) Epoch() uint64 {
	if p := j.CurrentPlan(); p != nil {
		return p.Epoch
	}
	return 0
}

// Is reports whether e is of kind.
func (e Event) Is(kind EventKind) bool { return e.Kind == kind }
