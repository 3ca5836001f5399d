package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// Blobs is the node's content-addressed blob store and the blob protocol. Nodes are named
// by their peer ID strings.
type Blobs interface {
	// IDOf is the hash data is stored under.
	IDOf(data []byte) string
	// Publish stores data and returns its hash.
	Publish(ctx context.Context, data []byte) (string, error)
	// Has reports whether this node holds the blob.
	Has(hash string) bool
	// Fetch fetches and verifies the blob from holders, then any live peer.
	Fetch(ctx context.Context, hash string, holders []string) error
	// ReadVerified reads a held blob checked against its hash; an error wrapping
	// ErrBlobCorrupt when the bytes no longer match.
	ReadVerified(hash string) ([]byte, error)
	// Size is the size of a held blob.
	Size(hash string) (int64, error)
	// Remove deletes a held blob.
	Remove(hash string) error
	// Replicate asks node to fetch the blob from this one and hold it.
	Replicate(ctx context.Context, node, hash string) error
	// List returns every blob this node holds.
	List() ([]HeldBlob, error)
}

// HeldBlob is one blob of this node's store.
type HeldBlob struct {
	Hash     string
	Size     int64
	StoredAt time.Time
}

// ErrBlobCorrupt means a held blob no longer matches its hash.
var ErrBlobCorrupt = errors.New("blob does not match its hash")

// Control is the control plane as the runner uses it: its write side, and one read the
// runner must not answer from its own FSM, which may lag behind.
type Control interface {
	// ReportProgress commits progress samples and this node's own phase times (either
	// may be empty); the leader records the times as this node's.
	ReportProgress(ctx context.Context, jobID string, samples []consensus.ProgressSample, stages []consensus.StageTimes) error
	AddCheckpoint(ctx context.Context, jobID string, m consensus.CheckpointManifest) error
	AddEvent(ctx context.Context, jobID string, e consensus.Event) error
	SetJobStatus(ctx context.Context, jobID string, status consensus.JobStatus, message string) error
	// PlanEpoch is the epoch of the job's current plan as the leader knows it (a
	// consistent read; 0 for a job without a plan).
	PlanEpoch(ctx context.Context, jobID string) (uint64, error)
}

// DataPlane is the tensor data plane a worker trains over.
type DataPlane interface {
	parallel.Transport
	// SetPeerAddr tells the data plane where a node listens.
	SetPeerAddr(node, addr string)
	// Purge drops the frames of job waiting for epochs up to throughEpoch, and those that
	// arrive for them later, so a replaced epoch's stragglers never fill the mailbox; it
	// returns how many it dropped.
	Purge(job uint64, throughEpoch uint32) int
}

// Network is what the runner needs of the node's networking.
type Network interface {
	// DataPlane is the node's data plane, nil when it is not running.
	DataPlane() DataPlane
	// DataAddr is the data-plane address a peer announced, false when it announced none.
	DataAddr(node string) (string, bool)
}

// Datasets loads the dataset a job names: the blob its submitting node published,
// fetching it if needed, or the local dataset this node's operator exposed under a name.
type Datasets interface {
	// LoadDataset loads the dataset blob; for a sharded dataset, only the training shards
	// train (indices in its manifest; nil: all) and the validation shards.
	LoadDataset(ctx context.Context, blob string, train []int) (*model.Dataset, error)
	// DatasetParts is the blobs a sharded dataset's manifest blob lists (its shards and
	// tokenizer), read from this node's store; nil when the node lacks the manifest or the
	// blob is one packed dataset. Garbage collection keeps them with the manifest.
	DatasetParts(blob string) []string
	// LoadLocalDataset opens the local dataset exposed as name (data.local), its ids
	// checked against vocab; an error wrapping model.ErrBadData when the node exposes none
	// of that name. Nothing of it is read from or sent to another node.
	LoadLocalDataset(ctx context.Context, name string, vocab int) (*model.Dataset, error)
}

// Config is a Runner's dependencies and settings.
type Config struct {
	Self     string // this node's ID
	DataDir  string // checkpoints are written under DataDir/checkpoints
	Log      *slog.Logger
	Blobs    Blobs
	Control  Control
	Network  Network
	Datasets Datasets
	// Metrics receives step times and checkpoint durations; nil records none.
	Metrics Metrics
	// PinFor is how long a checkpoint file this node has just written, fetched or agreed
	// to hold is safe from pruning, whatever the manifests say: long enough for its
	// manifest to be committed. Training is deterministic, so a job that resumes from an
	// older checkpoint writes files identical to ones an old manifest lists, and those must
	// not be pruned between their publication and the commit of the manifest that names
	// them again. Zero: files are pruned as soon as no manifest needs them.
	PinFor time.Duration
	// PruneEvery is how often the runner looks for checkpoint files it may delete (zero:
	// at every Reconcile).
	PruneEvery time.Duration
	// OrphanAge is how long a blob no job references (not a retained checkpoint's file,
	// not a job's dataset: left by a job the control plane no longer keeps, or a publish
	// whose submit failed) stays before it is deleted. Zero: never deleted. A dataset is
	// published before its job is committed, so this must exceed a submit's duration by
	// far; the node uses an hour.
	OrphanAge time.Duration
	// CrashInCheckpoint is a fault-injection hook for tests that exec nodes: when > 0, the
	// process dies in the middle of writing that step's checkpoint (see crashWriting).
	CrashInCheckpoint int
}

// Validate reports the first missing dependency.
func (c Config) Validate() error {
	switch {
	case c.Self == "":
		return errors.New("runner: Self is empty")
	case c.DataDir == "":
		return errors.New("runner: DataDir is empty")
	case c.Blobs == nil || c.Control == nil || c.Network == nil || c.Datasets == nil:
		return fmt.Errorf("runner: missing dependency (blobs %v, control %v, network %v, datasets %v)",
			c.Blobs != nil, c.Control != nil, c.Network != nil, c.Datasets != nil)
	}
	return nil
}
