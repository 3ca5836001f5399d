package consensus

import (
	"fmt"
	"slices"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Bounds on what one job keeps in the FSM. Older entries are dropped first.
const (
	// MaxEventsPerJob bounds a job's events other than local evaluations.
	MaxEventsPerJob = 256
	// MaxLocalEvalsPerJob bounds a job's local evaluations (EventLocalEval) apart from its
	// other events: a data.local job records one per replica at every evaluation, and a
	// long federated job would otherwise push its plans, checkpoints and failures out.
	MaxLocalEvalsPerJob = 256
	MaxProgressPerJob   = 512
	// MaxStageTimesPerJob bounds the plan members' phase times kept (records.StageTimes):
	// each member reports one entry per runner.stageTimesEvery or so.
	MaxStageTimesPerJob  = 256
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

// addEvent appends e to j's event log. Local evaluations and the other events are bounded
// apart (MaxLocalEvalsPerJob, MaxEventsPerJob): one more beyond its class's bound drops
// an older one of the same class (evictable), reallocating so that earlier clones are
// unaffected.
func addEvent(j *Job, e Event) {
	local := e.Kind == EventLocalEval
	limit, n := MaxEventsPerJob, 0
	if local {
		limit = MaxLocalEvalsPerJob
	}
	for _, x := range j.Events {
		if (x.Kind == EventLocalEval) == local {
			n++
		}
	}
	if n < limit {
		j.Events = append(j.Events, e)
		return
	}
	drop := evictable(j.Events, local)
	out := make([]Event, 0, len(j.Events))
	out = append(append(out, j.Events[:drop]...), j.Events[drop+1:]...)
	j.Events = append(out, e)
}

// evictable is the index of the event to drop for one more of a class (local evaluations
// or the rest; events holds at least one of it): the oldest of the class, except that
// each node's first local evaluation stays while the node has a later one to drop (the
// first and the latest are what `meshnode job` shows of a node's curve).
func evictable(events []Event, local bool) int {
	oldest, firstOf := -1, map[string]bool{}
	for i, x := range events {
		if (x.Kind == EventLocalEval) != local {
			continue
		}
		if !local {
			return i
		}
		if oldest < 0 {
			oldest = i
		}
		if firstOf[x.By] {
			return i
		}
		firstOf[x.By] = true
	}
	return oldest
}

// cloneJob copies the job deeply enough that a reader never shares a slice the FSM appends to.
// Plan blobs and checkpoint file lists are never modified after they are stored.
func cloneJob(j *Job) Job {
	c := *j
	c.Plans = slices.Clone(j.Plans)
	c.Progress = slices.Clone(j.Progress)
	c.StageTimes = slices.Clone(j.StageTimes)
	c.Checkpoints = slices.Clone(j.Checkpoints)
	c.Events = slices.Clone(j.Events)
	c.Verdicts = slices.Clone(j.Verdicts)
	return c
}

func (n *Node) clone() Node {
	c := *n
	c.Addrs = slices.Clone(n.Addrs)
	return c
}

// addFiles merges files into manifest m: a file already listed (same holder, hash, kind,
// replica and layers) is not added twice, and a manifest never exceeds
// MaxFilesPerCheckpoint files.
func addFiles(m *CheckpointManifest, files []CheckpointFile) error {
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
