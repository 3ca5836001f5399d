package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/node/runner"
)

// The runner's dependencies, implemented by the node.
type (
	nodeBlobs    struct{ n *Node }
	nodeControl  struct{ n *Node }
	nodeNetwork  struct{ n *Node }
	nodeDatasets struct{ n *Node }
)

func (b nodeBlobs) IDOf(data []byte) string { return b.n.Blobs().Store().IDOf(data) }
func (b nodeBlobs) Has(hash string) bool    { return b.n.Blobs().Has(hash) }
func (b nodeBlobs) List() ([]runner.HeldBlob, error) {
	held, err := b.n.Blobs().Store().List()
	out := make([]runner.HeldBlob, 0, len(held))
	for _, h := range held {
		out = append(out, runner.HeldBlob{Hash: h.ID, Size: h.Size, StoredAt: h.StoredAt})
	}
	return out, err
}

func (b nodeBlobs) Remove(hash string) error {
	if err := b.n.Blobs().Store().Remove(hash); err != nil {
		return err
	}
	b.n.blobsRemoved.Add(1)
	return nil
}

func (b nodeBlobs) Publish(ctx context.Context, data []byte) (string, error) {
	return b.n.Blobs().Publish(ctx, bytes.NewReader(data))
}

// Fetch fetches a blob from holders; with none named (a job's model.init weights, which
// the submitting node and its replicas hold), from every live peer.
func (b nodeBlobs) Fetch(ctx context.Context, hash string, holders []string) error {
	from := peerIDs(holders)
	if len(holders) == 0 {
		from = b.n.data.sources(nil)
	}
	return b.n.Blobs().Fetch(ctx, hash, from)
}

func (b nodeBlobs) ReadVerified(hash string) ([]byte, error) {
	data, err := b.n.Blobs().Store().ReadVerified(hash)
	if errors.Is(err, blob.ErrCorrupt) {
		return nil, fmt.Errorf("%w: %w", runner.ErrBlobCorrupt, err)
	}
	return data, err
}

func (b nodeBlobs) Size(hash string) (int64, error) {
	m, err := b.n.Blobs().Store().Manifest(hash)
	if err != nil {
		return 0, err
	}
	return m.Size, nil
}

func (b nodeBlobs) Replicate(ctx context.Context, node, hash string) error {
	p, err := peer.Decode(node)
	if err != nil {
		return fmt.Errorf("replicate to %q: %w", node, err)
	}
	return b.n.Blobs().Replicate(ctx, p, hash)
}

// peerIDs decodes node IDs, skipping any that is not a peer ID.
func peerIDs(ids []string) []peer.ID {
	var out []peer.ID
	for _, id := range ids {
		if p, err := peer.Decode(id); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (c nodeControl) consensus() (*consensus.Consensus, error) {
	if cs := c.n.Consensus(); cs != nil {
		return cs, nil
	}
	return nil, errNoConsensus
}

func (c nodeControl) ReportProgress(ctx context.Context, job string, s []consensus.ProgressSample, stages []consensus.StageTimes) error {
	cs, err := c.consensus()
	if err != nil {
		return err
	}
	return cs.ReportProgressTimes(ctx, job, s, stages)
}

func (c nodeControl) AddCheckpoint(ctx context.Context, job string, m consensus.CheckpointManifest) error {
	cs, err := c.consensus()
	if err != nil {
		return err
	}
	return cs.AddCheckpoint(ctx, job, m)
}

// ShipEvidence sends a worker's offender evidence to the leader (runner.EvidenceShipper),
// as a blob when it is too large for the RPC.
func (c nodeControl) ShipEvidence(ctx context.Context, job, member string, evidence []byte) error {
	cs, err := c.consensus()
	if err != nil {
		return err
	}
	return c.n.shipEvidence(ctx, cs, job, member, evidence)
}

func (c nodeControl) AddEvent(ctx context.Context, job string, ev consensus.Event) error {
	cs, err := c.consensus()
	if err != nil {
		return err
	}
	return cs.AddEvent(ctx, job, ev)
}

func (c nodeControl) PlanEpoch(ctx context.Context, job string) (uint64, error) {
	cs, err := c.consensus()
	if err != nil {
		return 0, err
	}
	j, _, err := cs.Job(ctx, job, true)
	if err != nil {
		return 0, err
	}
	if cur := j.CurrentPlan(); cur != nil {
		return cur.Epoch, nil
	}
	return 0, nil
}

func (c nodeControl) SetJobStatus(ctx context.Context, job string, s consensus.JobStatus, msg string) error {
	cs, err := c.consensus()
	if err != nil {
		return err
	}
	return cs.SetJobStatus(ctx, job, s, msg)
}

func (w nodeNetwork) DataPlane() runner.DataPlane {
	if dp := w.n.DataPlane(); dp != nil {
		return dp
	}
	return nil
}

// DataAddr is where the node sends node's tensors: the data-plane address its link probe
// confirmed, else the first the peer announces.
func (w nodeNetwork) DataAddr(node string) (string, bool) {
	for _, pi := range w.n.mesh.Peers() {
		if pi.ID.String() == node {
			return w.n.prober.dataAddr(pi.ID, pi.Profile.DataCandidates())
		}
	}
	return "", false
}

func (d nodeDatasets) DatasetParts(blob string) []string { return d.n.data.parts(blob) }

func (d nodeDatasets) LoadDataset(ctx context.Context, blob string, train []int) (*model.Dataset, error) {
	data, err := d.n.LoadDatasetShards(ctx, blob, train, nil)
	if err == nil && noiseData() {
		d.n.log.Warn("test hook: training on noise in place of the dataset's training split", "env", NoiseDataEnv, "blob", blob)
		data = noisyTraining(data)
	}
	return data, err
}

// NoiseDataEnv is a fault-injection hook for tests that exec nodes: a node started with it
// set to "1" trains every job on random tokens in place of its share of the training split,
// the validation split kept, and signs what it computes like any member: a member that
// lies by training on something else, as two colluders do in the testnet's scenario of
// members that lie (testnet, TestColludersAreConvictedAndLeftOut). Unset (always, outside
// tests) it does nothing; it only changes what this node itself computes.
const NoiseDataEnv = "MESHNODE_TEST_NOISE_DATA"

func noiseData() bool { return os.Getenv(NoiseDataEnv) == "1" }

// noisyTraining is d with its training split replaced by as many uniformly random tokens
// (at most 1 MiB of them) below its vocabulary and 256.
func noisyTraining(d *model.Dataset) *model.Dataset {
	n := min(d.Train.Len(), 1<<20)
	vocab := min(max(d.Vocab, 2), 256)
	rng := rand.New(rand.NewPCG(7, 11))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(vocab))
	}
	out := *d
	out.Train = model.ByteTokens(b)
	return &out
}

func (d nodeDatasets) LoadLocalDataset(ctx context.Context, name string, vocab int) (*model.Dataset, error) {
	return d.n.data.local.load(ctx, name, vocab)
}

// CrashInCheckpointEnv is a fault-injection hook for tests that exec nodes: a node started
// with it set to a step number dies in the middle of writing that step's checkpoint, half
// of its first file in the temporary file the atomic write uses, as a crash or power cut
// would leave it. Unset (always, outside tests) it does nothing.
const CrashInCheckpointEnv = "MESHNODE_TEST_CRASH_IN_CHECKPOINT"

// crashInCheckpoint is the step CrashInCheckpointEnv names, -1 when unset.
func crashInCheckpoint() int {
	n, err := strconv.Atoi(os.Getenv(CrashInCheckpointEnv))
	if err != nil || n <= 0 {
		return -1
	}
	return n
}
