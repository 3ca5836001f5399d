package consensus

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// MessageType is the first byte of every Raft log entry. Values are append-only: never
// renumber or reuse one, or old logs will be replayed as something else.
type MessageType uint8

// Message types. Add new ones at the end.
const (
	NodeUpsertType MessageType = 1 // NodeUpsertRequest
	NodeStatusType MessageType = 2 // NodeStatusRequest
	JobSubmitType  MessageType = 3 // JobSubmitRequest
	JobStatusType  MessageType = 4 // JobStatusRequest
	PlanSetType    MessageType = 5 // PlanSetRequest
	ProgressType   MessageType = 6 // ProgressRequest
	CheckpointType MessageType = 7 // CheckpointRequest
	JobEventType   MessageType = 8 // JobEventRequest
	// ClusterMetaType sets the cluster ID and retention. It is proposed with
	// IgnoreUnknownTypeFlag so that older binaries skip it.
	ClusterMetaType MessageType = 9 // ClusterMetaRequest
	// PromotionType records an operator's decision on a non-voter's promotion. It is
	// proposed with IgnoreUnknownTypeFlag so that older binaries skip it.
	PromotionType MessageType = 10 // PromotionRequest
	// SpeedProofType records what a node proved of its compute speed to the leader
	// (speed_proof.go). It is proposed with IgnoreUnknownTypeFlag so that older binaries
	// skip it.
	SpeedProofType MessageType = 11 // SpeedProofRequest
	// VerdictType records a leader's check of offender evidence (verdict.go). Like a
	// speed proof only the leader writes it, with IgnoreUnknownTypeFlag.
	VerdictType MessageType = 12 // VerdictRequest
)

// IgnoreUnknownTypeFlag, set on a message type, tells a replica that does not know the type
// to skip the entry instead of panicking. New, optional message types set it so that older
// binaries in a mixed-version mesh keep running.
const IgnoreUnknownTypeFlag MessageType = 0x80

// NodeUpsertRequest records a node (its addresses, profile and status).
type NodeUpsertRequest struct {
	Node Node `json:"node"`
}

// NodeStatusRequest changes a node's status (alive, dead, left).
type NodeStatusRequest struct {
	ID     string     `json:"id"`
	Status NodeStatus `json:"status"`
	Time   time.Time  `json:"time"`
}

// JobSubmitRequest records a new job; the leader chose ID and Time. SubmittedBy is the
// member that submitted it (the authenticated caller; empty in entries written before
// quotas), whose live jobs are counted against its quota (quota.go).
type JobSubmitRequest struct {
	ID          string       `json:"id"`
	Spec        jobspec.Spec `json:"spec"`
	Time        time.Time    `json:"time"`
	SubmittedBy string       `json:"submitted_by,omitempty"`
}

// JobStatusRequest moves a job to a new status (cancellation is Status = cancelled).
type JobStatusRequest struct {
	ID      string    `json:"id"`
	Status  JobStatus `json:"status"`
	Message string    `json:"message,omitempty"`
	Time    time.Time `json:"time"`
}

// PlanSetRequest commits a new plan epoch for a job. Epoch must exceed the current one.
type PlanSetRequest struct {
	JobID  string          `json:"job_id"`
	Epoch  uint64          `json:"epoch"`
	Plan   json.RawMessage `json:"plan"`
	Reason string          `json:"reason,omitempty"`
	Time   time.Time       `json:"time"`
}

// ProgressRequest appends a batch of progress samples to a job.
type ProgressRequest struct {
	JobID   string           `json:"job_id"`
	Samples []ProgressSample `json:"samples"`
	// Stages are the reporting member's own phase times; the leader stamps each entry's
	// Node with the member that sent the report.
	Stages []StageTimes `json:"stages,omitempty"`
}

// CheckpointRequest records a checkpoint manifest for a job.
type CheckpointRequest struct {
	JobID    string             `json:"job_id"`
	Manifest CheckpointManifest `json:"manifest"`
}

// JobEventRequest appends one event to a job's log.
type JobEventRequest struct {
	JobID string `json:"job_id"`
	Event Event  `json:"event"`
}

// ClusterMetaRequest records the cluster's ID (set once, never changed) and how many
// finished jobs the FSM keeps.
type ClusterMetaRequest struct {
	ClusterID        string `json:"cluster_id"`
	KeepFinishedJobs int    `json:"keep_finished_jobs"`
	// MaxLiveJobsPerMember is the proposing leader's quota; the FSM takes it only while it
	// holds none (the founding leader's, or the first leader's since the field exists).
	MaxLiveJobsPerMember int `json:"max_live_jobs_per_member,omitempty"`
}

// PromotionRequest records an operator's decision on whether node ID may become a voter.
type PromotionRequest struct {
	ID       string            `json:"id"`
	Decision PromotionDecision `json:"decision"`
}

// Encode builds a log entry: the type byte followed by msg as JSON.
func Encode(t MessageType, msg any) ([]byte, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encode message type %d: %w", t, err)
	}
	return append([]byte{byte(t)}, body...), nil
}
