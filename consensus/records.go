package consensus

import "github.com/meshnode/meshnode/records"

// The job records the FSM stores and the API serves are package records' (a leaf the API
// client imports without Raft); consensus names them for its own code and callers.
type (
	Job                = records.Job
	PlanEpoch          = records.PlanEpoch
	ProgressSample     = records.ProgressSample
	StageTimes         = records.StageTimes
	CheckpointFile     = records.CheckpointFile
	CheckpointManifest = records.CheckpointManifest
	Event              = records.Event
	Verdict            = records.Verdict
	JobSummary         = records.JobSummary
	JobDetail          = records.JobDetail
	ProgressView       = records.ProgressView
	RaftStatus         = records.RaftStatus
)
