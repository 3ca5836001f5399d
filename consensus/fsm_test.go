package consensus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// fsmHarness applies entries with increasing indexes.
type fsmHarness struct {
	t     *testing.T
	fsm   *FSM
	index uint64
}

func newHarness(t *testing.T) *fsmHarness { return &fsmHarness{t: t, fsm: NewFSM(nil)} }

func (h *fsmHarness) apply(mt MessageType, msg any) any {
	h.t.Helper()
	buf, err := Encode(mt, msg)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.applyRaw(buf)
}

func (h *fsmHarness) applyRaw(buf []byte) any {
	h.index++
	return h.fsm.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: buf})
}

func (h *fsmHarness) mustOK(mt MessageType, msg any) {
	h.t.Helper()
	if res := h.apply(mt, msg); res != nil {
		h.t.Fatalf("apply %d: %v", mt, res)
	}
}

func (h *fsmHarness) mustErr(target error, mt MessageType, msg any) {
	h.t.Helper()
	res := h.apply(mt, msg)
	err, _ := res.(error)
	if !errors.Is(err, target) {
		h.t.Fatalf("apply %d: got %v, want %v", mt, res, target)
	}
}

func (h *fsmHarness) job(id string) Job {
	h.t.Helper()
	j, _, err := h.fsm.Job(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return j
}

func TestFSMNodes(t *testing.T) {
	h := newHarness(t)
	n := Node{ID: "n1", Addrs: []string{"/ip4/127.0.0.1/tcp/1"}, Profile: Profile{CPUs: 2, GFLOPS: 10}, Status: NodeAlive, UpdatedAt: t0}
	h.mustOK(NodeUpsertType, NodeUpsertRequest{Node: n})
	h.mustOK(NodeStatusType, NodeStatusRequest{ID: "n1", Status: NodeDead, Time: t0.Add(time.Second)})
	h.mustOK(NodeStatusType, NodeStatusRequest{ID: "n2", Status: NodeLeft, Time: t0})
	nodes, index := h.fsm.Nodes()
	if index != 3 || len(nodes) != 2 {
		t.Fatalf("index %d, nodes %+v", index, nodes)
	}
	want := n
	want.Status, want.UpdatedAt = NodeDead, t0.Add(time.Second)
	if !reflect.DeepEqual(nodes[0], want) || nodes[1].Status != NodeLeft {
		t.Fatalf("nodes = %+v", nodes)
	}
	nodes[0].Addrs[0] = "mutated" // readers get copies
	if got, _ := h.fsm.Node("n1"); got.Addrs[0] == "mutated" {
		t.Fatal("Nodes returned shared state")
	}
}

func TestFSMJobLifecycle(t *testing.T) {
	h := newHarness(t)
	spec := jobspec.DefaultSpec()
	spec.Name = "lifecycle"
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j1", Spec: spec, Time: t0})
	h.mustErr(ErrBadTransition, JobSubmitType, JobSubmitRequest{ID: "j1", Spec: spec, Time: t0})
	j := h.job("j1")
	if j.Status != JobSubmitted || j.Name != "lifecycle" || !j.SubmittedAt.Equal(t0) || j.Spec != spec || len(j.Events) != 1 {
		t.Fatalf("submitted job = %+v", j)
	}

	h.mustErr(ErrBadTransition, JobStatusType, JobStatusRequest{ID: "j1", Status: JobDone, Time: t0})
	h.mustErr(ErrJobNotFound, JobStatusType, JobStatusRequest{ID: "nope", Status: JobPlanning, Time: t0})
	h.mustOK(JobStatusType, JobStatusRequest{ID: "j1", Status: JobPlanning, Time: t0.Add(1)})

	plan := json.RawMessage(`{"stages":[{"node":"n1","layers":[0,5]}]}`)
	h.mustOK(PlanSetType, PlanSetRequest{JobID: "j1", Epoch: 1, Plan: plan, Reason: "initial", Time: t0.Add(2)})
	h.mustErr(ErrStaleEpoch, PlanSetType, PlanSetRequest{JobID: "j1", Epoch: 1, Plan: plan, Time: t0.Add(3)})
	h.mustErr(ErrJobNotFound, PlanSetType, PlanSetRequest{JobID: "nope", Epoch: 1, Plan: plan, Time: t0})
	h.mustOK(JobStatusType, JobStatusRequest{ID: "j1", Status: JobRunning, Time: t0.Add(4)})

	h.mustOK(ProgressType, ProgressRequest{JobID: "j1", Samples: []ProgressSample{{Time: t0.Add(5), Epoch: 1, Step: 10, Loss: 3.5, TokensPerSec: 100, BytesSent: 42}}})
	h.mustErr(ErrJobNotFound, ProgressType, ProgressRequest{JobID: "nope"})
	cp := CheckpointManifest{Epoch: 1, Step: 10, Time: t0.Add(6), Files: []CheckpointFile{{Node: "n1", Layers: [2]int{0, 5}, Hash: "abc", Bytes: 9}}}
	h.mustOK(CheckpointType, CheckpointRequest{JobID: "j1", Manifest: cp})
	h.mustErr(ErrJobNotFound, CheckpointType, CheckpointRequest{JobID: "nope", Manifest: cp})
	h.mustOK(JobEventType, JobEventRequest{JobID: "j1", Event: Event{Time: t0.Add(7), Kind: "stage", Epoch: 1, Step: 10, Message: "stage 0 up"}})
	h.mustErr(ErrJobNotFound, JobEventType, JobEventRequest{JobID: "nope"})

	j = h.job("j1")
	if j.Status != JobRunning || j.Epoch() != 1 || string(j.CurrentPlan().Plan) != string(plan) {
		t.Fatalf("running job = %+v", j)
	}
	if len(j.Progress) != 1 || j.Progress[0].Loss != 3.5 || len(j.Checkpoints) != 1 || j.Checkpoints[0].Files[0].Hash != "abc" {
		t.Fatalf("progress/checkpoints = %+v / %+v", j.Progress, j.Checkpoints)
	}
	kinds := []string{}
	for _, e := range j.Events {
		kinds = append(kinds, string(e.Kind))
	}
	if fmt.Sprint(kinds) != "[submitted status plan status checkpoint stage]" {
		t.Fatalf("event kinds = %v", kinds)
	}

	h.mustOK(JobStatusType, JobStatusRequest{ID: "j1", Status: JobCancelled, Message: "by user", Time: t0.Add(8)})
	h.mustErr(ErrJobFinished, JobStatusType, JobStatusRequest{ID: "j1", Status: JobCancelled, Time: t0.Add(9)})
	h.mustErr(ErrJobFinished, PlanSetType, PlanSetRequest{JobID: "j1", Epoch: 2, Plan: plan, Time: t0.Add(9)})
	h.mustErr(ErrJobFinished, ProgressType, ProgressRequest{JobID: "j1"})
	if j := h.job("j1"); j.Status != JobCancelled || j.Events[len(j.Events)-1].Message != "cancelled: by user" {
		t.Fatalf("cancelled job = %+v", j)
	}
}

func TestFSMBounds(t *testing.T) {
	h := newHarness(t)
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j", Spec: jobspec.DefaultSpec(), Time: t0})
	var samples []ProgressSample
	for i := range MaxProgressPerJob + 10 {
		samples = append(samples, ProgressSample{Step: i, Time: t0})
	}
	h.mustOK(ProgressType, ProgressRequest{JobID: "j", Samples: samples})
	for i := range MaxEventsPerJob + 5 {
		h.mustOK(JobEventType, JobEventRequest{JobID: "j", Event: Event{Step: i, Kind: "x"}})
	}
	for i := range MaxPlansPerJob + 3 {
		h.mustOK(PlanSetType, PlanSetRequest{JobID: "j", Epoch: uint64(i + 1), Plan: json.RawMessage(`{}`)})
	}
	for i := range MaxCheckpointsPerJob + 2 {
		h.mustOK(CheckpointType, CheckpointRequest{JobID: "j", Manifest: CheckpointManifest{Step: i}})
	}
	j := h.job("j")
	if len(j.Progress) != MaxProgressPerJob || j.Progress[0].Step != 10 || j.Progress[len(j.Progress)-1].Step != MaxProgressPerJob+9 {
		t.Fatalf("progress bound: %d samples, first %d", len(j.Progress), j.Progress[0].Step)
	}
	if len(j.Events) != MaxEventsPerJob || j.Events[len(j.Events)-1].Kind != EventCheckpoint {
		t.Fatalf("events bound: %d", len(j.Events))
	}
	if len(j.Plans) != MaxPlansPerJob || j.Epoch() != MaxPlansPerJob+3 {
		t.Fatalf("plans bound: %d, epoch %d", len(j.Plans), j.Epoch())
	}
	if len(j.Checkpoints) != MaxCheckpointsPerJob || j.Checkpoints[0].Step != 2 {
		t.Fatalf("checkpoints bound: %d", len(j.Checkpoints))
	}
}

// TestFSMLocalEvalsBoundedApart: a long federated job's local evaluations (one per replica
// at every evaluation) are bounded apart from its other events: they never push a plan or a
// checkpoint event out, the other events never push them out, and when they reach their own
// bound the oldest are dropped except each node's first (the start of its curve).
func TestFSMLocalEvalsBoundedApart(t *testing.T) {
	h := newHarness(t)
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j", Spec: jobspec.DefaultSpec(), Time: t0})
	h.mustOK(JobEventType, JobEventRequest{JobID: "j", Event: Event{Step: 1, Kind: EventCheckpoint, Message: "kept"}})
	nodes := []string{"a", "b", "c"}
	const rounds = MaxLocalEvalsPerJob // 3× the bound in all
	for step := range rounds {
		for _, n := range nodes {
			h.mustOK(JobEventType, JobEventRequest{JobID: "j", Event: Event{Step: step, Kind: EventLocalEval, By: n}})
		}
	}
	j := h.job("j")
	var local, other []Event
	for _, e := range j.Events {
		if e.Kind == EventLocalEval {
			local = append(local, e)
		} else {
			other = append(other, e)
		}
	}
	if len(local) != MaxLocalEvalsPerJob {
		t.Fatalf("%d local evaluations kept, want %d", len(local), MaxLocalEvalsPerJob)
	}
	if len(other) != 2 || other[0].Kind != EventSubmitted || other[1].Message != "kept" {
		t.Fatalf("other events %+v: the local evaluations pushed them out", other)
	}
	for i, n := range nodes {
		if local[i].By != n || local[i].Step != 0 {
			t.Errorf("local evaluation %d is %s's at step %d, want %s's first (step 0)", i, local[i].By, local[i].Step, n)
		}
		if last := local[len(local)-len(nodes)+i]; last.By != n || last.Step != rounds-1 {
			t.Errorf("latest evaluations end with %s's at step %d, want %s's at step %d", last.By, last.Step, n, rounds-1)
		}
	}
	// Other events up to their own bound leave the local evaluations alone.
	for i := range MaxEventsPerJob + 5 {
		h.mustOK(JobEventType, JobEventRequest{JobID: "j", Event: Event{Step: i, Kind: "x"}})
	}
	j = h.job("j")
	if n := len(j.Events); n != MaxEventsPerJob+MaxLocalEvalsPerJob {
		t.Fatalf("%d events, want %d + %d", n, MaxEventsPerJob, MaxLocalEvalsPerJob)
	}
	if j.Events[0].Kind != EventLocalEval || j.Events[len(j.Events)-1].Step != MaxEventsPerJob+4 {
		t.Fatalf("events start with %+v and end with %+v", j.Events[0], j.Events[len(j.Events)-1])
	}
}

// TestFSMStageTimes: the plan members' phase times are kept in a bounded history, and an
// entry with too many of them, a time that is not one, or no node is refused whole.
func TestFSMStageTimes(t *testing.T) {
	h := newHarness(t)
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j", Spec: jobspec.DefaultSpec(), Time: t0})
	ok := StageTimes{Time: t0, Epoch: 1, Node: "n1", Steps: 4, Compute: 0.2, Transfer: 0.01, Bubble: 0.05}
	for i := range MaxStageTimesPerJob + 3 {
		s := ok
		s.Step = i
		h.mustOK(ProgressType, ProgressRequest{JobID: "j", Stages: []StageTimes{s}})
	}
	if j := h.job("j"); len(j.StageTimes) != MaxStageTimesPerJob || j.StageTimes[0].Step != 3 {
		t.Fatalf("stage times bound: %d entries, first step %d", len(j.StageTimes), j.StageTimes[0].Step)
	}
	bad := func(f func(*StageTimes)) ProgressRequest {
		s := ok
		f(&s)
		return ProgressRequest{JobID: "j", Samples: []ProgressSample{{Step: 1, Time: t0}}, Stages: []StageTimes{s}}
	}
	for name, req := range map[string]ProgressRequest{
		"negative": bad(func(s *StageTimes) { s.Bubble = -1 }),
		"huge":     bad(func(s *StageTimes) { s.Sync = 1e9 }),
		"no steps": bad(func(s *StageTimes) { s.Steps = 0 }),
		"no node":  bad(func(s *StageTimes) { s.Node = "" }),
		"too many": {JobID: "j", Stages: make([]StageTimes, maxStagesPerReport+1)},
	} {
		t.Run(name, func(t *testing.T) { h.t = t; h.mustErr(ErrBadEntry, ProgressType, req) })
	}
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

func TestFSMSnapshotRestore(t *testing.T) {
	h := newHarness(t)
	h.mustOK(NodeUpsertType, NodeUpsertRequest{Node: Node{ID: "n1", Addrs: []string{"/ip4/1.2.3.4/tcp/5"}, Profile: Profile{GPUs: 1, GPUName: "H100"}, Status: NodeAlive, UpdatedAt: t0}})
	h.mustOK(NodeStatusType, NodeStatusRequest{ID: "n2", Status: NodeDead, Time: t0})
	for i := range 3 {
		id := fmt.Sprintf("j%d", i)
		spec := jobspec.DefaultSpec()
		spec.Parallel.Stages = jobspec.Fixed(i + 1)
		h.mustOK(JobSubmitType, JobSubmitRequest{ID: id, Spec: spec, Time: t0.Add(time.Duration(i) * time.Second)})
		h.mustOK(PlanSetType, PlanSetRequest{JobID: id, Epoch: 1, Plan: json.RawMessage(`{"replicas":1}`), Time: t0})
		h.mustOK(ProgressType, ProgressRequest{JobID: id, Samples: []ProgressSample{{Time: t0, Step: i, Loss: 1.5}}})
		h.mustOK(CheckpointType, CheckpointRequest{JobID: id, Manifest: CheckpointManifest{Step: i, Time: t0, Files: []CheckpointFile{{Node: "n1", Hash: "h"}}}})
	}
	h.mustOK(JobStatusType, JobStatusRequest{ID: "j1", Status: JobCancelled, Time: t0})

	snap, err := h.fsm.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "after", Spec: jobspec.DefaultSpec(), Time: t0}) // not in the snapshot
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	restored := NewFSM(nil)
	restored.applied = 999 // Restore replaces everything
	if err := restored.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	wantJobs, _ := h.fsm.Jobs()
	gotJobs, gotIndex := restored.Jobs()
	wantNodes, _ := h.fsm.Nodes()
	gotNodes, _ := restored.Nodes()
	if gotIndex != h.index-1 {
		t.Fatalf("restored index %d, want %d", gotIndex, h.index-1)
	}
	var wantNoAfter []Job
	for _, j := range wantJobs {
		if j.ID != "after" {
			wantNoAfter = append(wantNoAfter, j)
		}
	}
	if !reflect.DeepEqual(gotJobs, wantNoAfter) {
		t.Fatalf("jobs differ after restore:\n got %+v\nwant %+v", gotJobs, wantNoAfter)
	}
	if !reflect.DeepEqual(gotNodes, wantNodes) {
		t.Fatalf("nodes differ after restore:\n got %+v\nwant %+v", gotNodes, wantNodes)
	}
}

func TestFSMUnknownTypes(t *testing.T) {
	h := newHarness(t)
	if res := h.applyRaw([]byte{byte(IgnoreUnknownTypeFlag | 0x7f), '{', '}'}); res != nil {
		t.Fatalf("ignored entry returned %v", res)
	}
	if h.fsm.AppliedIndex() != 1 {
		t.Fatalf("applied index %d after skipped entry", h.fsm.AppliedIndex())
	}
	// A known type with the flag set is applied, not skipped.
	buf, _ := Encode(JobSubmitType|IgnoreUnknownTypeFlag, JobSubmitRequest{ID: "j", Spec: jobspec.DefaultSpec(), Time: t0})
	h.applyRaw(buf)
	if _, _, err := h.fsm.Job("j"); err != nil {
		t.Fatal("flagged known type was not applied")
	}
	// Entries no replica can apply are an error value, the same on every replica, and the
	// FSM carries on: a bad entry cannot crash every replica on each replay.
	bad := map[string][]byte{
		"unknown type":     {0x7f, '{', '}'},
		"corrupt":          {byte(JobSubmitType), '{', 'x'},
		"empty":            {},
		"path job id":      mustEncode(t, JobSubmitType, JobSubmitRequest{ID: "../../etc", Spec: jobspec.DefaultSpec(), Time: t0}),
		"slash job id":     mustEncode(t, JobEventType, JobEventRequest{JobID: "j/x", Event: Event{Kind: "x"}}),
		"bad node id":      mustEncode(t, NodeStatusType, NodeStatusRequest{ID: "a/b", Status: NodeDead}),
		"bad node status":  mustEncode(t, NodeStatusType, NodeStatusRequest{ID: "n1", Status: "zombie"}),
		"bad job status":   mustEncode(t, JobStatusType, JobStatusRequest{ID: "j", Status: "paused"}),
		"huge event":       mustEncode(t, JobEventType, JobEventRequest{JobID: "j", Event: Event{Kind: "x", Message: string(make([]byte, maxMessageLen+1))}}),
		"bad cluster meta": mustEncode(t, ClusterMetaType, ClusterMetaRequest{ClusterID: "nope"}),
	}
	for name, entry := range bad {
		t.Run(name, func(t *testing.T) {
			before := h.fsm.AppliedIndex()
			res := h.applyRaw(entry)
			if err, _ := res.(error); !errors.Is(err, ErrBadEntry) {
				t.Fatalf("Apply returned %v, want ErrBadEntry", res)
			}
			if h.fsm.AppliedIndex() != before+1 {
				t.Fatal("applied index did not advance past the bad entry")
			}
		})
	}
	if _, _, err := h.fsm.Job("../../etc"); err == nil {
		t.Fatal("a job with a path as id was applied")
	}
	h.mustOK(JobEventType, JobEventRequest{JobID: "j", Event: Event{Kind: "after-bad-entries"}})
}

func mustEncode(t testing.TB, mt MessageType, msg any) []byte {
	t.Helper()
	b, err := Encode(mt, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFSMIgnoresNonCommandLogs(t *testing.T) {
	f := NewFSM(nil)
	if res := f.Apply(&raft.Log{Index: 1, Type: raft.LogNoop}); res != nil {
		t.Fatal(res)
	}
}
