package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// fsmControl is the control plane of the runner's tests: a real FSM, written to as raft
// would after committing each entry.
type fsmControl struct {
	fsm *consensus.FSM

	mu    sync.Mutex
	index uint64
	// afterCheckpoint, when set, runs after every committed checkpoint write, under no lock.
	afterCheckpoint func()
}

func (c *fsmControl) apply(mt consensus.MessageType, msg any) error {
	buf, err := consensus.Encode(mt, msg)
	if err != nil {
		return fmt.Errorf("encode %T: %w", msg, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index++
	if res, ok := c.fsm.Apply(&raft.Log{Index: c.index, Type: raft.LogCommand, Data: buf}).(error); ok {
		return res
	}
	return nil
}

func (c *fsmControl) ReportProgress(_ context.Context, job string, s []consensus.ProgressSample, stages []consensus.StageTimes) error {
	return c.apply(consensus.ProgressType, consensus.ProgressRequest{JobID: job, Samples: s, Stages: stages})
}

func (c *fsmControl) AddCheckpoint(_ context.Context, job string, m consensus.CheckpointManifest) error {
	if err := c.apply(consensus.CheckpointType, consensus.CheckpointRequest{JobID: job, Manifest: m}); err != nil {
		return err
	}
	if c.afterCheckpoint != nil {
		c.afterCheckpoint()
	}
	return nil
}

func (c *fsmControl) AddEvent(_ context.Context, job string, e consensus.Event) error {
	e.Time = time.Now().UTC()
	return c.apply(consensus.JobEventType, consensus.JobEventRequest{JobID: job, Event: e})
}

func (c *fsmControl) SetJobStatus(_ context.Context, job string, s consensus.JobStatus, msg string) error {
	return c.apply(consensus.JobStatusType, consensus.JobStatusRequest{ID: job, Status: s, Message: msg, Time: time.Now().UTC()})
}

func (c *fsmControl) PlanEpoch(_ context.Context, job string) (uint64, error) {
	j, _, err := c.fsm.Job(job)
	if err != nil {
		return 0, err
	}
	if cur := j.CurrentPlan(); cur != nil {
		return cur.Epoch, nil
	}
	return 0, nil
}

// memBlobs are the blob stores of the nodes of a test, one map per node, with fetch and
// replication between them.
type memBlobs struct {
	mu     sync.Mutex
	stores map[string]map[string][]byte
	// storedAt is when a node came to hold a blob ("node/hash"); a blob without an entry
	// counts as stored long ago.
	storedAt map[string]time.Time
}

// node is one node's view of the stores.
type nodeBlobs struct {
	all  *memBlobs
	self string
}

func hashOf(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

func (b nodeBlobs) store(node string) map[string][]byte {
	if b.all.stores[node] == nil {
		b.all.stores[node] = map[string][]byte{}
	}
	return b.all.stores[node]
}

func (b nodeBlobs) IDOf(data []byte) string { return hashOf(data) }

func (b nodeBlobs) Publish(_ context.Context, data []byte) (string, error) {
	b.all.mu.Lock()
	defer b.all.mu.Unlock()
	id := hashOf(data)
	b.store(b.self)[id] = append([]byte(nil), data...)
	return id, nil
}

func (b nodeBlobs) Has(hash string) bool {
	b.all.mu.Lock()
	defer b.all.mu.Unlock()
	_, ok := b.store(b.self)[hash]
	return ok
}

func (b nodeBlobs) copy(from, to, hash string) error {
	b.all.mu.Lock()
	defer b.all.mu.Unlock()
	data, ok := b.store(from)[hash]
	if !ok {
		return fmt.Errorf("%s does not hold %s", from, hash)
	}
	b.store(to)[hash] = data
	return nil
}

func (b nodeBlobs) Fetch(_ context.Context, hash string, holders []string) error {
	err := errors.New("no holders")
	for _, h := range holders {
		if err = b.copy(h, b.self, hash); err == nil {
			return nil
		}
	}
	return err
}

func (b nodeBlobs) ReadVerified(hash string) ([]byte, error) {
	b.all.mu.Lock()
	defer b.all.mu.Unlock()
	data, ok := b.store(b.self)[hash]
	if !ok {
		return nil, fmt.Errorf("%s not held", hash)
	}
	if hashOf(data) != hash {
		return nil, ErrBlobCorrupt
	}
	return data, nil
}

func (b nodeBlobs) Size(hash string) (int64, error) {
	data, err := b.ReadVerified(hash)
	return int64(len(data)), err
}

func (b nodeBlobs) Remove(hash string) error {
	b.all.mu.Lock()
	defer b.all.mu.Unlock()
	delete(b.store(b.self), hash)
	return nil
}

func (b nodeBlobs) Replicate(_ context.Context, node, hash string) error {
	return b.copy(b.self, node, hash)
}

func (b nodeBlobs) List() ([]HeldBlob, error) {
	b.all.mu.Lock()
	defer b.all.mu.Unlock()
	var out []HeldBlob
	for h, data := range b.store(b.self) {
		out = append(out, HeldBlob{Hash: h, Size: int64(len(data)), StoredAt: b.all.storedAt[b.self+"/"+h]})
	}
	return out, nil
}

// memNetwork is the in-process data plane of a test.
type memNetwork struct {
	net  *parallel.InMemory
	self string
}

type memDataPlane struct{ parallel.Transport }

func (memDataPlane) SetPeerAddr(string, string) {}

// Purge has nothing to drop: the in-memory transport delivers only to running receivers.
func (memDataPlane) Purge(uint64, uint32) int { return 0 }

func (n memNetwork) DataPlane() DataPlane           { return memDataPlane{n.net.Peer(n.self)} }
func (n memNetwork) DataAddr(string) (string, bool) { return "in-memory", true }

// noDatasets: the tests' jobs name a local corpus, never a dataset blob.
type noDatasets struct{}

func (noDatasets) LoadLocalDataset(context.Context, string, int) (*model.Dataset, error) {
	return nil, errors.New("no local datasets")
}

func (noDatasets) DatasetParts(string) []string { return nil }

func (noDatasets) LoadDataset(context.Context, string, []int) (*model.Dataset, error) {
	return nil, errors.New("no dataset blobs in this test")
}
