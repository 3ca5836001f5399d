package consensus

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Bounds on what one job keeps in the FSM. Older entries are dropped first.
const (
	MaxEventsPerJob      = 256
	MaxProgressPerJob    = 512
	MaxPlansPerJob       = 16
	MaxCheckpointsPerJob = 16
	// MaxFilesPerCheckpoint bounds the files (stages × kinds × holders) of one manifest.
	MaxFilesPerCheckpoint = 1024
	// DefaultKeepFinishedJobs is how many finished jobs the FSM keeps unless the cluster
	// was configured otherwise (Config.KeepFinishedJobs).
	DefaultKeepFinishedJobs = 100
	// MaxKeepFinishedJobs bounds Config.KeepFinishedJobs.
	MaxKeepFinishedJobs = 10000
)

// NodeStatus is a node's membership as the leader last saw it.
type NodeStatus string

// Node statuses.
const (
	NodeAlive NodeStatus = "alive"
	NodeDead  NodeStatus = "dead"
	NodeLeft  NodeStatus = "left"
)

// Profile is the summary of a node's measured capability that the control plane keeps; the
// full profile, with the node's data-plane address, travels in gossip heartbeats
// (mesh.Profile), not in Raft.
type Profile struct {
	CPUs        int     `json:"cpus,omitempty"`
	GFLOPS      float64 `json:"gflops,omitempty"`
	MemoryBytes uint64  `json:"memory_bytes,omitempty"`
	GPUs        int     `json:"gpus,omitempty"`
	GPUName     string  `json:"gpu_name,omitempty"`
}

// Node is one member of the mesh as the FSM records it. ID is the libp2p peer ID.
type Node struct {
	ID        string     `json:"id"`
	Addrs     []string   `json:"addrs"`
	Profile   Profile    `json:"profile"`
	Status    NodeStatus `json:"status"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// JobStatus is where a job is in its life (jobspec.JobStatus, shared with the scheduler).
type JobStatus = jobspec.JobStatus

// Job statuses, as jobspec defines them. Done, failed and cancelled are terminal.
const (
	JobSubmitted = jobspec.JobSubmitted
	JobPlanning  = jobspec.JobPlanning
	JobRunning   = jobspec.JobRunning
	JobDone      = jobspec.JobDone
	JobFailed    = jobspec.JobFailed
	JobCancelled = jobspec.JobCancelled
)

// allowedNext lists the statuses a job may move to from each non-terminal status.
var allowedNext = map[JobStatus][]JobStatus{
	JobSubmitted: {JobPlanning, JobFailed, JobCancelled},
	JobPlanning:  {JobRunning, JobFailed, JobCancelled},
	JobRunning:   {JobPlanning, JobDone, JobFailed, JobCancelled},
}

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
}

// Job is one submitted job and everything the control plane knows about it.
type Job struct {
	ID          string       `json:"id"`
	Name        string       `json:"name"`
	Spec        jobspec.Spec `json:"spec"`
	Status      JobStatus    `json:"status"`
	SubmittedAt time.Time    `json:"submitted_at"`
	// SubmittedBy is the member that submitted the job ("" for jobs from before quotas).
	SubmittedBy string               `json:"submitted_by,omitempty"`
	UpdatedAt   time.Time            `json:"updated_at"`
	Plans       []PlanEpoch          `json:"plans"`
	Progress    []ProgressSample     `json:"progress"`
	Checkpoints []CheckpointManifest `json:"checkpoints"`
	Events      []Event              `json:"events"`
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

func (j *Job) addEvent(e Event) {
	j.Events = appendBounded(j.Events, MaxEventsPerJob, e)
}

// clone copies the job deeply enough that a reader never shares a slice the FSM appends to.
// Plan blobs and checkpoint file lists are never modified after they are stored.
func (j *Job) clone() Job {
	c := *j
	c.Plans = slices.Clone(j.Plans)
	c.Progress = slices.Clone(j.Progress)
	c.Checkpoints = slices.Clone(j.Checkpoints)
	c.Events = slices.Clone(j.Events)
	return c
}

func (n *Node) clone() Node {
	c := *n
	c.Addrs = slices.Clone(n.Addrs)
	return c
}

// addFiles merges files into the manifest: a file already listed (same holder, hash, kind,
// replica and layers) is not added twice, and a manifest never exceeds
// MaxFilesPerCheckpoint files.
func (m *CheckpointManifest) addFiles(files []CheckpointFile) error {
	merged := slices.Clone(m.Files)
	for _, f := range files {
		if !slices.Contains(merged, f) {
			merged = append(merged, f)
		}
	}
	if len(merged) > MaxFilesPerCheckpoint {
		return fmt.Errorf("checkpoint at step %d would list %d files (max %d): %w", m.Step, len(merged), MaxFilesPerCheckpoint, ErrTooLarge)
	}
	m.Files = merged
	return nil
}

// appendBounded appends v and drops the oldest entries beyond max, always reallocating
// when it drops so that earlier clones are unaffected.
func appendBounded[T any](s []T, max int, v T) []T {
	if len(s) < max {
		return append(s, v)
	}
	out := make([]T, 0, max)
	out = append(out, s[len(s)-max+1:]...)
	return append(out, v)
}
