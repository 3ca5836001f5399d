package scheduler

import (
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Event is one line of a job's event log.
type Event struct {
	Kind    jobspec.EventKind
	Epoch   uint64
	Step    int
	Message string
	// By is the member that recorded it, as the control plane authenticated it.
	By string
}

// File kinds of a checkpoint.
const (
	FileModel     = "model"     // the layers' weights
	FileOptimizer = "optimizer" // their optimizer moments
)

// CheckpointFile is one stage's file of a checkpoint as one holder reported it.
type CheckpointFile struct {
	Kind    string // FileModel or FileOptimizer
	Node    string // a node that holds the file
	Layers  [2]int // [first, last] layer index held in the file
	Hash    string
	Replica int
}

// Checkpoint is the set of files that together make the checkpoint of one step.
type Checkpoint struct {
	Epoch uint64
	Step  int
	Files []CheckpointFile
}

// Job is the scheduler's view of one job.
type Job struct {
	ID     string
	Spec   jobspec.Spec
	Status jobspec.JobStatus
	// SubmittedAt is when the control plane took the job (the leader's clock).
	SubmittedAt time.Time
	// Epoch is the current plan epoch (0 before the first plan) and Plan its plan; Plan is
	// nil when there is none or it does not decode.
	Epoch       uint64
	Plan        *JobPlan
	Events      []Event
	Checkpoints []Checkpoint
	// PlanSetAt is when the current plan was committed (zero without one).
	PlanSetAt time.Time
	// Progress are the job's progress samples, oldest first (the FSM keeps a bounded
	// history), and Epochs its plan epochs, current included, oldest first: calibration
	// (calibration.go) compares what each epoch measured with what its plan predicted.
	Progress []Sample
	Epochs   []EpochPlan
	// StageTimes are the plan members' own phase times, oldest first (a bounded history):
	// calibration prices each node by its own compute time where it has them.
	StageTimes []StageSample
	// Verdicts are the leaders' checks of offender evidence, oldest first
	// (records.Verdict): a convicting one excludes its member from the plan (Offenders).
	Verdicts []Verdict
}

// Verdict is a leader's check of the evidence Accuser shipped against Member at plan
// epoch Epoch: Convicted when the leader's recomputation dropped Member too.
type Verdict struct {
	Member, Accuser string
	Convicted       bool
	Epoch           uint64
	Step            int
	By              string
}

// StageSample is one plan member's own mean compute time per step over the steps since
// its previous report (records.StageTimes), as the leader attributed it.
type StageSample struct {
	Epoch    uint64
	Step     int // the newest step its means cover
	Node     string
	ComputeS float64
}

// Sample is one progress report of a job's reporting worker (the last stage of replica 0).
type Sample struct {
	Time  time.Time
	Epoch uint64
	Step  int
	// StepS is the mean wall time of the steps since the previous sample (0: none).
	StepS float64
}

// EpochPlan is one plan epoch of a job; Plan is nil when it does not decode.
type EpochPlan struct {
	Epoch uint64
	SetAt time.Time
	Plan  *JobPlan
}

// MemberState is a node's liveness as the peer table sees it.
type MemberState string

// Member states.
const (
	MemberAlive   MemberState = "alive"
	MemberSuspect MemberState = "suspect"
	MemberDead    MemberState = "dead"
)

// Member is a node of the mesh as the leader sees it.
type Member struct {
	ID    string
	State MemberState
	// Profile is what the node measured and announced, nil when it has announced no
	// usable profile (no measured speed, memory budget or data-plane address): the
	// balancer never plans on it.
	Profile *Profile
	// ProofPending says that the member announced a profile the balancer could plan on
	// but the leader has committed no proof of its speed yet (not challenged yet, or a
	// challenge in flight or refused and retried): Profile is nil meanwhile, and a first
	// plan waits for it up to Config.ProofWait. A member that lied, or proved nothing
	// twice in a row (late), is not pending: it is out of plans at once; after one late
	// answer it is pending until the leader's retry.
	ProofPending bool
}

// Profile is a node's measured capability as the balancer prices it.
type Profile struct {
	GFLOPS      float64 // training compute rate
	MemoryBytes int64   // memory budget for layers
	Links       []Link  // what this node measured towards its peers
	// DiskReadBps and DiskWriteBps are the measured bandwidths of the node's data
	// directory, what offloaded training state moves at (0: not measured, the balancer's
	// conservative default).
	DiskReadBps, DiskWriteBps float64
	// LocalData names the local datasets the node's operator exposed: a job with
	// data.local is planned only on nodes that list its name.
	LocalData []string
	// DiskFreeBytes is the free space of the node's data directory it announced: stages
	// offload on it only within jobspec.OffloadDiskRoom of it (balancer.Node.DiskFreeBytes).
	// Nil: not known, no bound; the node's engine always sets it.
	DiskFreeBytes *uint64
	// Host names the machine the node runs on (records.Profile.Host); nodes of one host
	// share its cores (balancer.Node.Host). Empty: unknown.
	Host string
	// HostShare is the fraction of its host's cores the node keeps busy while it computes
	// (balancer.Node.HostShare; 0 means 1).
	HostShare float64
	// HostLoad is the load other programs put on the node's host, in cores
	// (balancer.Node.HostLoad; 0: none or not measured), as the planning node measured it
	// on its own host. The calibration replaces it for a node whose steps were measured
	// (Calibration.HostLoad).
	HostLoad float64
	// MicroEfficiency is the node's training rate on one-sequence micro-batches over its
	// rate on the profile's 8-sequence ones (balancer.Node.MicroEfficiency; 0: not
	// measured, priced as 1).
	MicroEfficiency float64
}

// Link is one measured link from a node to a peer.
type Link struct {
	Peer         string
	RTTSeconds   float64
	BandwidthBps float64
}
