package consensus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Arguments of the job operations. Times are absent: the leader stamps them.
type (
	// SubmitArgs submits a job.
	SubmitArgs struct {
		Spec jobspec.Spec `json:"spec"`
	}
	// SubmitResult names the new job.
	SubmitResult struct {
		ID string `json:"id"`
	}
	// StatusArgs moves a job to a new status.
	StatusArgs struct {
		ID      string    `json:"id"`
		Status  JobStatus `json:"status"`
		Message string    `json:"message,omitempty"`
	}
	// PlanArgs sets a job's next plan epoch.
	PlanArgs struct {
		JobID  string          `json:"job_id"`
		Plan   json.RawMessage `json:"plan"`
		Reason string          `json:"reason,omitempty"`
	}
	// PlanResult is the epoch the leader gave the plan.
	PlanResult struct {
		Epoch uint64 `json:"epoch"`
	}
	// JobArgs names one job.
	JobArgs struct {
		ID string `json:"id"`
	}
	// JobResult is one job and the index of the FSM it was read from.
	JobResult struct {
		Job   Job    `json:"job"`
		Index uint64 `json:"index"`
	}
	// ListArgs asks for one page of jobs: at most Limit (0: DefaultPageSize, capped at
	// MaxPageSize) jobs after the cursor After ("" for the first page).
	ListArgs struct {
		After string `json:"after,omitempty"`
		Limit int    `json:"limit,omitempty"`
	}
	// JobsResult is one page of jobs, the cursor of the next page ("" after the last) and
	// the index of the FSM they were read from.
	JobsResult struct {
		Jobs  []Job  `json:"jobs"`
		Next  string `json:"next,omitempty"`
		Index uint64 `json:"index"`
	}
)

// maxSamplesPerReport bounds one progress report; maxStagesPerReport its phase times
// (one member's own: a few entries when earlier reports failed).
const (
	maxSamplesPerReport = 1024
	maxStagesPerReport  = 16
)

// SubmitJob validates spec and commits it as a new job in status submitted; the leader
// assigns the id and submission time. It works on any node.
func (c *Consensus) SubmitJob(ctx context.Context, spec jobspec.Spec) (string, error) {
	if err := spec.Validate(); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	var res SubmitResult
	err := c.do(ctx, "submit", SubmitArgs{Spec: spec}, &res)
	return res.ID, err
}

// CancelJob moves a job to cancelled. It fails with ErrJobNotFound or ErrJobFinished.
func (c *Consensus) CancelJob(ctx context.Context, id string) error {
	return c.SetJobStatus(ctx, id, JobCancelled, "cancelled by user")
}

// SetJobStatus moves a job along its life (submitted → planning → running → done|failed,
// or any live status → cancelled); other transitions fail with ErrBadTransition.
func (c *Consensus) SetJobStatus(ctx context.Context, id string, status JobStatus, message string) error {
	return c.do(ctx, "set_status", StatusArgs{ID: id, Status: status, Message: message}, nil)
}

// SetPlan commits plan as the job's next epoch and returns the epoch.
func (c *Consensus) SetPlan(ctx context.Context, jobID string, plan json.RawMessage, reason string) (uint64, error) {
	var res PlanResult
	err := c.do(ctx, "set_plan", PlanArgs{JobID: jobID, Plan: plan, Reason: reason}, &res)
	return res.Epoch, err
}

// ReportProgress appends samples to the job's bounded progress history. Samples without
// a time get the leader's.
func (c *Consensus) ReportProgress(ctx context.Context, jobID string, samples []ProgressSample) error {
	return c.ReportProgressTimes(ctx, jobID, samples, nil)
}

// ReportProgressTimes is ReportProgress with this member's own phase times (stages),
// which the leader records as this member's (StageTimes.Node).
func (c *Consensus) ReportProgressTimes(ctx context.Context, jobID string, samples []ProgressSample, stages []StageTimes) error {
	return c.do(ctx, "progress", ProgressRequest{JobID: jobID, Samples: samples, Stages: stages}, nil)
}

// AddCheckpoint records a checkpoint manifest for the job.
func (c *Consensus) AddCheckpoint(ctx context.Context, jobID string, m CheckpointManifest) error {
	return c.do(ctx, "checkpoint", CheckpointRequest{JobID: jobID, Manifest: m}, nil)
}

// AddEvent appends e to the job's bounded event log; the leader stamps a missing time.
func (c *Consensus) AddEvent(ctx context.Context, jobID string, e Event) error {
	return c.do(ctx, "event", JobEventRequest{JobID: jobID, Event: e}, nil)
}

// Job reads one job. With consistent false it is this node's FSM, possibly behind the
// leader, with the index it has applied; with consistent true the leader answers after a
// barrier, so every write committed before the call is visible.
func (c *Consensus) Job(ctx context.Context, id string, consistent bool) (Job, uint64, error) {
	if !consistent {
		return c.fsm.Job(id)
	}
	var res JobResult
	err := c.do(ctx, "get_job", JobArgs{ID: id}, &res)
	return res.Job, res.Index, err
}

// Jobs reads all jobs, oldest first; consistent as for Job. A consistent read fetches
// every page from the leader; the index is the first page's.
func (c *Consensus) Jobs(ctx context.Context, consistent bool) ([]Job, uint64, error) {
	if !consistent {
		jobs, index := c.fsm.Jobs()
		return jobs, index, nil
	}
	var all []Job
	var index uint64
	for after := ""; ; {
		page, idx, err := c.JobsPage(ctx, true, ListArgs{After: after, Limit: MaxPageSize})
		if err != nil {
			return nil, 0, err
		}
		if index == 0 {
			index = idx
		}
		all = append(all, page.Jobs...)
		if page.Next == "" {
			return all, index, nil
		}
		after = page.Next
	}
}

// LeaderIndex is the index the leader's FSM has applied after a barrier: every entry
// committed before the call. A node whose own FSM has applied it has seen all of that.
func (c *Consensus) LeaderIndex(ctx context.Context) (uint64, error) {
	_, index, err := c.JobsPage(ctx, true, ListArgs{Limit: 1})
	return index, err
}

// JobsPage reads one page of jobs, oldest submission first; consistent as for Job.
func (c *Consensus) JobsPage(ctx context.Context, consistent bool, args ListArgs) (JobPage, uint64, error) {
	if !consistent {
		page, index := c.fsm.JobsPage(args.After, args.Limit)
		return page, index, nil
	}
	var res JobsResult
	if err := c.do(ctx, "list_jobs", args, &res); err != nil {
		return JobPage{}, 0, err
	}
	return JobPage{Jobs: res.Jobs, Next: res.Next}, res.Index, nil
}

func now() time.Time { return time.Now().UTC() }

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (c *Consensus) handleSubmit(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[SubmitArgs](body)
	if err != nil {
		return nil, err
	}
	if err := args.Spec.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	c.submits.mu.Lock()
	defer c.submits.mu.Unlock()
	// A leader elected a moment ago may not have applied every entry committed before: the
	// count must include the member's earlier submits. Once per term is enough, as a
	// leader's own submits are applied before propose returns.
	if term := c.raft.CurrentTerm(); c.submits.barrierTerm != term {
		if err := c.barrier(ctx); err != nil {
			return nil, err
		}
		c.submits.barrierTerm = term
	}
	if err := c.checkQuota(from.String()); err != nil {
		return nil, err
	}
	id := newJobID()
	req := JobSubmitRequest{ID: id, Spec: args.Spec, Time: now(), SubmittedBy: from.String()}
	if _, err := c.propose(ctx, JobSubmitType, req); err != nil {
		return nil, err
	}
	return SubmitResult{ID: id}, nil
}

func (c *Consensus) handleSetStatus(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[StatusArgs](body)
	if err != nil {
		return nil, err
	}
	if err := c.authorizeStatus(from, args); err != nil {
		return nil, err
	}
	req := JobStatusRequest{ID: args.ID, Status: args.Status, Message: truncate(args.Message, maxMessageLen), Time: now()}
	_, err = c.propose(ctx, JobStatusType, req)
	return struct{}{}, err
}

func (c *Consensus) handleSetPlan(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[PlanArgs](body)
	if err != nil {
		return nil, err
	}
	if from != c.host.ID() {
		return nil, fmt.Errorf("%w: only the leader plans; %s asked to set a plan for job %s", ErrForbidden, from, args.JobID)
	}
	if len(args.Plan) == 0 || string(args.Plan) == "null" {
		return nil, fmt.Errorf("%w: plan is empty", ErrBadRequest)
	}
	c.planMu.Lock() // epochs are decided here; one at a time so none is stale
	defer c.planMu.Unlock()
	j, _, err := c.fsm.Job(args.JobID)
	if err != nil {
		return nil, err
	}
	epoch := j.Epoch() + 1
	req := PlanSetRequest{JobID: args.JobID, Epoch: epoch, Plan: args.Plan, Reason: truncate(args.Reason, maxMessageLen), Time: now()}
	if _, err = c.propose(ctx, PlanSetType, req); err != nil {
		return nil, err
	}
	return PlanResult{Epoch: epoch}, nil
}

func (c *Consensus) handleProgress(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[ProgressRequest](body)
	if err != nil {
		return nil, err
	}
	if len(args.Samples) > maxSamplesPerReport {
		return nil, fmt.Errorf("%d progress samples in one report (max %d): %w", len(args.Samples), maxSamplesPerReport, ErrTooLarge)
	}
	if len(args.Stages) > maxStagesPerReport {
		return nil, fmt.Errorf("%d phase times in one report (max %d): %w", len(args.Stages), maxStagesPerReport, ErrTooLarge)
	}
	if err := c.authorizeReporter(from, args.JobID); err != nil {
		return nil, err
	}
	t := now()
	for i := range args.Samples {
		if args.Samples[i].Time.IsZero() {
			args.Samples[i].Time = t
		}
	}
	for i := range args.Stages {
		args.Stages[i].Node = from.String() // who measured them: calibration prices that node
		if args.Stages[i].Time.IsZero() {
			args.Stages[i].Time = t
		}
	}
	_, err = c.propose(ctx, ProgressType, args)
	return struct{}{}, err
}

func (c *Consensus) handleCheckpoint(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[CheckpointRequest](body)
	if err != nil {
		return nil, err
	}
	if err := c.authorizeReporter(from, args.JobID); err != nil {
		return nil, err
	}
	if err := c.authorizeHolders(from, args); err != nil {
		return nil, err
	}
	if args.Manifest.Time.IsZero() {
		args.Manifest.Time = now()
	}
	_, err = c.propose(ctx, CheckpointType, args)
	return struct{}{}, err
}

func (c *Consensus) handleEvent(ctx context.Context, from peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[JobEventRequest](body)
	if err != nil {
		return nil, err
	}
	if err := c.authorizeReporter(from, args.JobID); err != nil {
		return nil, err
	}
	if args.Event.Time.IsZero() {
		args.Event.Time = now()
	}
	args.Event.Message = truncate(args.Event.Message, maxMessageLen)
	args.Event.By = from.String() // who reported it: the scheduler counts distinct reporters
	_, err = c.propose(ctx, JobEventType, args)
	return struct{}{}, err
}

func (c *Consensus) handleGetJob(ctx context.Context, _ peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[JobArgs](body)
	if err != nil {
		return nil, err
	}
	if err := c.barrier(ctx); err != nil {
		return nil, err
	}
	j, index, err := c.fsm.Job(args.ID)
	if err != nil {
		return nil, err
	}
	return JobResult{Job: j, Index: index}, nil
}

func (c *Consensus) handleListJobs(ctx context.Context, _ peer.ID, body []byte) (any, error) {
	args, err := decodeArgs[ListArgs](body)
	if err != nil {
		return nil, err
	}
	if err := c.barrier(ctx); err != nil {
		return nil, err
	}
	page, index := c.fsm.JobsPage(args.After, args.Limit)
	return JobsResult{Jobs: page.Jobs, Next: page.Next, Index: index}, nil
}

// barrier returns once every entry committed before it is applied to the local FSM; on a
// leader this makes the following read linearizable.
func (c *Consensus) barrier(ctx context.Context) error {
	return c.futureErr(ctx, c.raft.Barrier(c.cfg.RPCTimeout))
}
