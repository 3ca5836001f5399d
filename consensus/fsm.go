package consensus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM is the replicated state machine. Apply is called by raft, one entry at a time; the
// read methods may be called concurrently from anywhere and return copies.
type FSM struct {
	log *slog.Logger

	mu      sync.RWMutex
	state   fsmState
	applied uint64 // index of the last entry applied (or restored)

	watch appliedWatch // watch.go: closed at every apply and restore
}

// fsmState is everything the FSM holds; it is also the snapshot's format.
type fsmState struct {
	Index uint64          `json:"index"`
	Nodes map[string]Node `json:"nodes"`
	Jobs  map[string]*Job `json:"jobs"`
	// ClusterID is the cluster's ID, committed by its first leader; it never changes.
	ClusterID string `json:"cluster_id,omitempty"`
	// KeepFinished is how many finished jobs are kept; 0 means DefaultKeepFinishedJobs.
	KeepFinished int `json:"keep_finished,omitempty"`
	// MaxLiveJobs is the cluster's quota of live jobs per member (quota.go), set once by
	// the first leader that commits cluster metadata; 0 before.
	MaxLiveJobs int `json:"max_live_jobs,omitempty"`
	// Promotions are the operators' decisions on non-voters' promotion, by node ID.
	Promotions map[string]PromotionDecision `json:"promotions,omitempty"`
	// SpeedProofs are the latest speed proofs the leaders committed, by node ID
	// (speed_proof.go).
	SpeedProofs map[string]SpeedProof `json:"speed_proofs,omitempty"`
}

func newState() fsmState {
	return fsmState{Nodes: map[string]Node{}, Jobs: map[string]*Job{}}
}

// NewFSM returns an empty FSM. A nil logger discards.
func NewFSM(log *slog.Logger) *FSM {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &FSM{log: log, state: newState()}
}

// Apply applies one committed entry. An entry that cannot be applied (unknown type without
// IgnoreUnknownTypeFlag, corrupt or invalid payload) is logged and returned as an error
// wrapping ErrBadEntry: every replica reaches the same verdict from the same bytes, so they
// stay identical, and no entry can crash every replica again on each replay. Business
// errors (unknown job, stale epoch, …) are returned as the entry's response value too.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	defer f.watch.notify() // after the unlock below: waiters read the new state
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = l.Index
	res := f.apply(l.Data, l.Index)
	if err, ok := res.(error); ok && errors.Is(err, ErrBadEntry) {
		f.log.Error("log entry not applied", "index", l.Index, "err", err)
	}
	return res
}

func (f *FSM) apply(data []byte, index uint64) any {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty entry at index %d", ErrBadEntry, index)
	}
	t, buf := MessageType(data[0]), data[1:]
	switch t &^ IgnoreUnknownTypeFlag {
	case NodeUpsertType:
		return applyAs(buf, index, f.applyNodeUpsert)
	case NodeStatusType:
		return applyAs(buf, index, f.applyNodeStatus)
	case JobSubmitType:
		return applyAs(buf, index, f.applyJobSubmit)
	case JobStatusType:
		return applyAs(buf, index, f.applyJobStatus)
	case PlanSetType:
		return applyAs(buf, index, f.applyPlanSet)
	case ProgressType:
		return applyAs(buf, index, f.applyProgress)
	case CheckpointType:
		return applyAs(buf, index, f.applyCheckpoint)
	case JobEventType:
		return applyAs(buf, index, f.applyJobEvent)
	case ClusterMetaType:
		return applyAs(buf, index, f.applyClusterMeta)
	case PromotionType:
		return applyAs(buf, index, f.applyPromotion)
	case SpeedProofType:
		return applyAs(buf, index, f.applySpeedProof)
	case VerdictType:
		return applyAs(buf, index, f.applyVerdict)
	}
	if t&IgnoreUnknownTypeFlag != 0 {
		f.log.Warn("skipping unknown message type", "type", uint8(t), "index", index)
		return nil
	}
	return fmt.Errorf("%w: unknown message type %d at index %d (written by a newer version?)", ErrBadEntry, t, index)
}

// entry is a request that checks itself before it is applied.
type entry interface{ validate() error }

// applyAs decodes buf as a T, validates it, and applies it with fn.
func applyAs[T entry](buf []byte, index uint64, fn func(T) any) any {
	var v T
	if err := json.Unmarshal(buf, &v); err != nil {
		return fmt.Errorf("%w: corrupt %T at index %d: %v", ErrBadEntry, v, index, err)
	}
	if err := v.validate(); err != nil {
		return fmt.Errorf("%w: invalid %T at index %d: %v", ErrBadEntry, v, index, err)
	}
	return fn(v)
}

func (f *FSM) applyNodeUpsert(req NodeUpsertRequest) any {
	f.state.Nodes[req.Node.ID] = req.Node.clone()
	return nil
}

func (f *FSM) applyNodeStatus(req NodeStatusRequest) any {
	n, ok := f.state.Nodes[req.ID]
	if !ok {
		n = Node{ID: req.ID}
	}
	n.Status, n.UpdatedAt = req.Status, req.Time
	f.state.Nodes[req.ID] = n
	return nil
}

func (f *FSM) applyJobSubmit(req JobSubmitRequest) any {
	if _, ok := f.state.Jobs[req.ID]; ok {
		return fmt.Errorf("job %s already exists: %w", req.ID, ErrBadTransition)
	}
	j := &Job{ID: req.ID, Name: req.Spec.Name, Spec: req.Spec, Status: JobSubmitted,
		SubmittedAt: req.Time, SubmittedBy: req.SubmittedBy, UpdatedAt: req.Time}
	addEvent(j, Event{Time: req.Time, Kind: EventSubmitted, Message: "job submitted"})
	f.state.Jobs[req.ID] = j
	return nil
}

func (f *FSM) applyJobStatus(req JobStatusRequest) any {
	j, err := f.liveJob(req.ID)
	if err != nil {
		return err
	}
	if !slices.Contains(allowedNext[j.Status], req.Status) {
		return fmt.Errorf("job %s: %s → %s: %w", req.ID, j.Status, req.Status, ErrBadTransition)
	}
	msg := string(req.Status)
	if req.Message != "" {
		msg += ": " + req.Message
	}
	j.Status, j.UpdatedAt = req.Status, req.Time
	addEvent(j, Event{Time: req.Time, Kind: EventStatus, Epoch: j.Epoch(), Message: msg})
	if j.Status.Terminal() {
		j.FinishedIndex = f.applied
		f.dropFinished()
	}
	return nil
}

func (f *FSM) applyPlanSet(req PlanSetRequest) any {
	j, err := f.liveJob(req.JobID)
	if err != nil {
		return err
	}
	if req.Epoch <= j.Epoch() {
		return fmt.Errorf("job %s: epoch %d ≤ current %d: %w", req.JobID, req.Epoch, j.Epoch(), ErrStaleEpoch)
	}
	j.Plans = appendBounded(j.Plans, MaxPlansPerJob, PlanEpoch{Epoch: req.Epoch, Plan: req.Plan, Reason: req.Reason, SetAt: req.Time})
	j.UpdatedAt = req.Time
	addEvent(j, Event{Time: req.Time, Kind: EventPlan, Epoch: req.Epoch, Message: strings.TrimSpace("plan set " + req.Reason)})
	return nil
}

func (f *FSM) applyProgress(req ProgressRequest) any {
	j, err := f.liveJob(req.JobID)
	if err != nil {
		return err
	}
	for _, s := range req.Samples {
		j.Progress = appendBounded(j.Progress, MaxProgressPerJob, s)
		j.UpdatedAt = s.Time
	}
	for _, s := range req.Stages {
		j.StageTimes = appendBounded(j.StageTimes, MaxStageTimesPerJob, s)
	}
	return nil
}

func (f *FSM) applyCheckpoint(req CheckpointRequest) any {
	j, err := f.liveJob(req.JobID)
	if err != nil {
		return err
	}
	m := req.Manifest
	j.UpdatedAt = m.Time
	// Stages report their files separately, and nodes that copy a file report themselves as
	// further holders: files of the same epoch and step join one manifest.
	for i := range j.Checkpoints {
		if c := &j.Checkpoints[i]; c.Epoch == m.Epoch && c.Step == m.Step {
			return addFiles(c, m.Files)
		}
	}
	j.Checkpoints = appendBounded(j.Checkpoints, MaxCheckpointsPerJob, m)
	addEvent(j, Event{Time: m.Time, Kind: EventCheckpoint, Epoch: m.Epoch, Step: m.Step,
		Message: fmt.Sprintf("checkpoint at step %d", m.Step)})
	return nil
}

func (f *FSM) applyJobEvent(req JobEventRequest) any {
	j, err := f.liveJob(req.JobID)
	if err != nil {
		return err
	}
	addEvent(j, req.Event)
	return nil
}

func (f *FSM) applyClusterMeta(req ClusterMetaRequest) any {
	if f.state.ClusterID != "" && f.state.ClusterID != req.ClusterID {
		return fmt.Errorf("%w: cluster id %s is set, refusing %s", ErrForeignCluster, f.state.ClusterID, req.ClusterID)
	}
	f.state.ClusterID, f.state.KeepFinished = req.ClusterID, req.KeepFinishedJobs
	if f.state.MaxLiveJobs == 0 {
		f.state.MaxLiveJobs = req.MaxLiveJobsPerMember // set once: a later leader's flag does not change it
	}
	f.dropFinished()
	return nil
}

// liveJob finds a job that may still change.
func (f *FSM) liveJob(id string) (*Job, error) {
	j, ok := f.state.Jobs[id]
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	if j.Status.Terminal() {
		return nil, fmt.Errorf("job %s is %s: %w", id, j.Status, ErrJobFinished)
	}
	return j, nil
}

// Job returns a copy of the job with the given id and the index the FSM has applied.
func (f *FSM) Job(id string) (Job, uint64, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j, ok := f.state.Jobs[id]
	if !ok {
		return Job{}, f.applied, fmt.Errorf("job %s: %w", id, ErrJobNotFound)
	}
	return cloneJob(j), f.applied, nil
}

// Jobs returns copies of all jobs, oldest submission first, and the applied index.
func (f *FSM) Jobs() ([]Job, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Job, 0, len(f.state.Jobs))
	for _, j := range f.state.Jobs {
		out = append(out, cloneJob(j))
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].SubmittedAt.Equal(out[b].SubmittedAt) {
			return out[a].SubmittedAt.Before(out[b].SubmittedAt)
		}
		return out[a].ID < out[b].ID
	})
	return out, f.applied
}

// Nodes returns copies of all nodes sorted by id, and the applied index.
func (f *FSM) Nodes() ([]Node, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Node, 0, len(f.state.Nodes))
	for _, n := range f.state.Nodes {
		out = append(out, n.clone())
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, f.applied
}

// Node returns a copy of one node and whether it exists.
func (f *FSM) Node(id string) (Node, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.state.Nodes[id]
	return n.clone(), ok
}

// AppliedIndex is the index of the last entry applied or restored.
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Snapshot captures the whole state. The copy is made here, under the lock, as JSON, so
// Persist can run concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := f.state
	st.Index = f.applied
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("snapshot fsm: %w", err)
	}
	return &fsmSnapshot{data: b}, nil
}

// Restore replaces the state with a snapshot's. A snapshot over MaxSnapshotBytes or one
// whose contents fail validation is refused and the state is left as it was.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st := newState()
	b, err := io.ReadAll(io.LimitReader(rc, MaxSnapshotBytes+1))
	if err != nil {
		return fmt.Errorf("restore fsm snapshot: %w", err)
	}
	if len(b) > MaxSnapshotBytes {
		return fmt.Errorf("restore fsm snapshot: more than %d bytes: %w", MaxSnapshotBytes, ErrTooLarge)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("restore fsm snapshot: %w", err)
	}
	if err := st.validate(); err != nil {
		return fmt.Errorf("restore fsm snapshot: %w", err)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]Node{}
	}
	if st.Jobs == nil {
		st.Jobs = map[string]*Job{}
	}
	defer f.watch.notify()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state, f.applied = st, st.Index
	return nil
}

type fsmSnapshot struct{ data []byte }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s.data); err != nil {
		sink.Cancel()
		return fmt.Errorf("persist fsm snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
