package consensus

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// validEntries is one valid encoding of every message type, applied in order to an empty
// FSM: the fuzz targets' seeds.
func validEntries(t testing.TB) [][]byte {
	node := "12D3KooWHiKLAJSjSN9Kkx5zNUer56ya91qHnKtGUuQHGh9tEkcE"
	plan := json.RawMessage(`{"replicas":[[{"node":"` + node + `","first":0,"last":6}]]}`)
	return [][]byte{
		mustEncode(t, ClusterMetaType|IgnoreUnknownTypeFlag, ClusterMetaRequest{ClusterID: "0123456789abcdef0123456789abcdef", KeepFinishedJobs: 2}),
		mustEncode(t, NodeUpsertType, NodeUpsertRequest{Node: Node{ID: node, Addrs: []string{"/ip4/1.2.3.4/tcp/1"}, Status: NodeAlive, UpdatedAt: t0}}),
		mustEncode(t, NodeStatusType, NodeStatusRequest{ID: node, Status: NodeDead, Time: t0}),
		mustEncode(t, JobSubmitType, JobSubmitRequest{ID: "j1", Spec: jobspec.DefaultSpec(), Time: t0}),
		mustEncode(t, JobStatusType, JobStatusRequest{ID: "j1", Status: JobPlanning, Time: t0}),
		mustEncode(t, PlanSetType, PlanSetRequest{JobID: "j1", Epoch: 1, Plan: plan, Time: t0}),
		mustEncode(t, ProgressType, ProgressRequest{JobID: "j1", Samples: []ProgressSample{{Step: 1, Loss: 2, Time: t0}}}),
		mustEncode(t, CheckpointType, CheckpointRequest{JobID: "j1", Manifest: CheckpointManifest{Step: 1, Files: []CheckpointFile{{Node: node, Hash: "h"}}}}),
		mustEncode(t, JobEventType, JobEventRequest{JobID: "j1", Event: Event{Kind: "x", Message: "m"}}),
		mustEncode(t, SpeedProofType|IgnoreUnknownTypeFlag, SpeedProofRequest{Proof: SpeedProof{ID: node, ClaimGFLOPS: 1e6, GFLOPS: 40, Time: t0, By: node}}),
		mustEncode(t, VerdictType|IgnoreUnknownTypeFlag, VerdictRequest{JobID: "j1", Verdict: Verdict{Member: node, Accuser: "n2", Convicted: true, Time: t0, By: node}}),
		mustEncode(t, JobStatusType, JobStatusRequest{ID: "j1", Status: JobCancelled, Time: t0}),
	}
}

// snapshotBytes persists f's snapshot.
func snapshotBytes(t testing.TB, f *FSM) []byte {
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// FuzzFSMApply applies an arbitrary entry after a valid history: Apply never panics, an
// entry it cannot apply is an ErrBadEntry value, and whatever state results survives a
// snapshot and restore unchanged.
func FuzzFSMApply(f *testing.F) {
	entries := validEntries(f)
	for _, e := range entries {
		f.Add(e)
	}
	f.Add([]byte{0x7f, '{', '}'})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(nil)
		for i, e := range entries[:len(entries)-1] {
			fsm.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e})
		}
		res := fsm.Apply(&raft.Log{Index: 100, Type: raft.LogCommand, Data: data})
		if err, ok := res.(error); ok && len(data) > 0 && data[0]&^byte(IgnoreUnknownTypeFlag) > byte(VerdictType) && !errors.Is(err, ErrBadEntry) {
			t.Fatalf("unknown type answered %v", err)
		}
		before := snapshotBytes(t, fsm)
		restored := NewFSM(nil)
		if err := restored.Restore(io.NopCloser(bytes.NewReader(before))); err != nil {
			t.Fatalf("state after apply does not restore: %v", err)
		}
		if after := snapshotBytes(t, restored); !bytes.Equal(before, after) {
			t.Fatalf("snapshot changed across restore:\n%s\n%s", before, after)
		}
	})
}

// FuzzFSMRestore feeds arbitrary snapshots to Restore: it never panics, and a snapshot it
// accepts holds only valid state.
func FuzzFSMRestore(f *testing.F) {
	fsm := NewFSM(nil)
	for i, e := range validEntries(f) {
		fsm.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: e})
	}
	f.Add(snapshotBytes(f, fsm))
	f.Add([]byte(`{"index":3,"nodes":{},"jobs":{"../x":{"id":"../x"}}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewFSM(nil)
		if err := r.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		r.mu.RLock()
		err := r.state.validate()
		r.mu.RUnlock()
		if err != nil {
			t.Fatalf("restore accepted invalid state: %v", err)
		}
	})
}
