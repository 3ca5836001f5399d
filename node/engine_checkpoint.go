package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// Kinds of checkpoint files.
const (
	ckptModel     = "model"
	ckptOptimizer = "optimizer"
)

// writeCheckpoint writes a stage's snapshot to the node's data dir (temp file, fsync,
// rename), publishes both files as blobs so any node can fetch them by hash, has another
// node of the plan fetch and verify them (replicate on commit: a checkpoint in the
// manifest outlives its writer), and only then commits them to the job's manifest of
// that step, with both holders. It runs off the training goroutine.
func (e *engine) writeCheckpoint(ctx context.Context, jobID string, epoch uint64, jp JobPlan, keep int, s parallel.StageState) error {
	dir := filepath.Join(e.n.cfg.DataDir, "checkpoints", jobID, "step-"+strconv.Itoa(s.Step))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := fmt.Sprintf("layers-%d-%d", s.First, s.Last)
	meta := map[string]string{"step": strconv.Itoa(s.Step)}
	var files []consensus.CheckpointFile
	for _, f := range []struct {
		kind    string
		tensors map[string]*kernels.Tensor
		meta    map[string]string
	}{{ckptModel, s.Model, meta}, {ckptOptimizer, s.Optimizer, s.OptimizerMeta}} {
		var buf bytes.Buffer
		if err := model.EncodeSafetensors(&buf, f.tensors, f.meta); err != nil {
			return err
		}
		path := filepath.Join(dir, base+"."+f.kind+".safetensors")
		if crashInCheckpoint == s.Step {
			crashWriting(path, buf.Bytes())
		}
		if err := model.WriteFileAtomic(path, buf.Bytes()); err != nil {
			return err
		}
		e.n.pins.pin(e.n.Blobs().Store().IDOf(buf.Bytes()))
		id, err := e.n.Blobs().Publish(ctx, bytes.NewReader(buf.Bytes()))
		if err != nil {
			return fmt.Errorf("publish %s: %w", path, err)
		}
		files = append(files, consensus.CheckpointFile{Kind: f.kind, Node: e.n.ID().String(),
			Layers: [2]int{s.First, s.Last - 1}, Hash: id, Bytes: int64(buf.Len()), Replica: s.Replica})
	}
	// A plan of one node has nowhere to copy to: that is its nature, not a fault to warn of.
	if len(slices.Compact(jp.Nodes())) > 1 {
		if to, err := e.replicateFiles(ctx, jp, files); err == nil {
			for _, f := range files[:len(files):len(files)] {
				f.Node = to
				files = append(files, f)
			}
		} else if ctx.Err() == nil {
			e.n.log.Warn("checkpoint has one holder", "job", jobID, "step", s.Step, "err", err)
		}
	}
	c := e.n.Consensus()
	if c == nil {
		return errNoConsensus
	}
	if err := c.AddCheckpoint(ctx, jobID, consensus.CheckpointManifest{Epoch: epoch, Step: s.Step, Time: time.Now().UTC(), Files: files}); err != nil {
		return err
	}
	return pruneCheckpoints(filepath.Dir(dir), keep)
}

// CrashInCheckpointEnv is a fault-injection hook for tests that exec nodes: a node started
// with it set to a step number dies in the middle of writing that step's checkpoint, half
// of its first file in the temporary file the atomic write uses, as a crash or power cut
// would leave it. Unset (always, outside tests) it does nothing.
const CrashInCheckpointEnv = "MESHNODE_TEST_CRASH_IN_CHECKPOINT"

var crashInCheckpoint = func() int {
	n, err := strconv.Atoi(os.Getenv(CrashInCheckpointEnv))
	if err != nil || n <= 0 {
		return -1
	}
	return n
}()

// crashWriting writes half of data where model.WriteFileAtomic would stage path, makes it
// durable, and ends the process at once, running nothing deferred.
func crashWriting(path string, data []byte) {
	if f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*"); err == nil {
		f.Write(data[:len(data)/2])
		f.Sync()
	}
	os.Exit(137)
}

// replicateFiles has one other node of the plan fetch every file, trying them in ring
// order from this node's place in the plan (so the stages' copies spread), and returns
// the node that now holds them all. It fails when the plan has no other node or none took
// the files.
func (e *engine) replicateFiles(ctx context.Context, jp JobPlan, files []consensus.CheckpointFile) (string, error) {
	self := e.n.ID().String()
	nodes := slices.Compact(jp.Nodes())
	at := slices.Index(nodes, self)
	err := errors.New("no other node in the plan")
	for i := 1; i < len(nodes); i++ {
		to := nodes[(at+i)%len(nodes)]
		if to == self {
			continue
		}
		var p peer.ID
		if p, err = peer.Decode(to); err != nil {
			continue
		}
		for _, f := range files {
			if err = e.n.Blobs().Replicate(ctx, p, f.Hash); err != nil {
				break
			}
		}
		if err == nil {
			return to, nil
		}
		e.n.log.Info("checkpoint replica refused", "to", to, "err", err)
	}
	return "", err
}

// acceptReplica is the blob service's policy for peers asking this node to hold a blob:
// only a node that shares a running job with this one may.
func (n *Node) acceptReplica(from peer.ID, hash string) error {
	c := n.Consensus()
	if c == nil {
		return errNoConsensus
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	jobs, _, err := c.Jobs(ctx, false)
	if err != nil {
		return err
	}
	self := n.ID().String()
	for _, j := range jobs {
		cur := j.CurrentPlan()
		if j.Status != consensus.JobRunning || cur == nil {
			continue
		}
		var jp JobPlan
		if json.Unmarshal(cur.Plan, &jp) != nil {
			continue
		}
		if nodes := jp.Nodes(); slices.Contains(nodes, self) && slices.Contains(nodes, from.String()) {
			n.pins.pin(hash) // its manifest is committed only once this node holds it
			return nil
		}
	}
	return errors.New("no running job holds both nodes")
}

// pruneCheckpoints deletes all but the newest keep step-N directories under jobDir.
func pruneCheckpoints(jobDir string, keep int) error {
	entries, err := os.ReadDir(jobDir)
	if err != nil {
		return err
	}
	var steps []int
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "step-")); err == nil && e.IsDir() && strings.HasPrefix(e.Name(), "step-") {
			steps = append(steps, n)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(steps)))
	for _, n := range steps[min(len(steps), max(1, keep)):] {
		if err := os.RemoveAll(filepath.Join(jobDir, "step-"+strconv.Itoa(n))); err != nil {
			return err
		}
	}
	return nil
}

// completeCheckpoint is the latest checkpoint whose files hold every layer of the model,
// weights and moments, counting only files with a holder for which live says true (nil:
// every holder); ok is false when there is none.
func completeCheckpoint(j consensus.Job, numLayers int, live func(node string) bool) (consensus.CheckpointManifest, bool) {
	for i := len(j.Checkpoints) - 1; i >= 0; i-- {
		if m := j.Checkpoints[i]; CheckpointSurvives(m, numLayers, live) {
			return m, true
		}
	}
	return consensus.CheckpointManifest{}, false
}

// CheckpointSurvives reports whether m's files, counting only those with a holder for which
// live says true (nil: all), hold every one of numLayers layers, weights and moments: a job
// can resume from it.
func CheckpointSurvives(m consensus.CheckpointManifest, numLayers int, live func(node string) bool) bool {
	return covers(m, ckptModel, numLayers, live) && covers(m, ckptOptimizer, numLayers, live)
}

func covers(m consensus.CheckpointManifest, kind string, numLayers int, live func(string) bool) bool {
	held := make([]bool, numLayers)
	for _, f := range m.Files {
		if f.Kind != kind || (live != nil && !live(f.Node)) {
			continue
		}
		for l := max(0, f.Layers[0]); l <= f.Layers[1] && l < numLayers; l++ {
			held[l] = true
		}
	}
	for _, h := range held {
		if !h {
			return false
		}
	}
	return true
}

// restoreWorker loads the layers a worker holds from the checkpoint of step, fetching
// (and verifying) the files it lacks from the nodes that wrote them.
func (e *engine) restoreWorker(ctx context.Context, j consensus.Job, w *parallel.Worker, step int) error {
	var m *consensus.CheckpointManifest
	for i := range j.Checkpoints {
		if j.Checkpoints[i].Step == step {
			m = &j.Checkpoints[i]
		}
	}
	if m == nil {
		return fmt.Errorf("no checkpoint of step %d to resume from", step)
	}
	first, last := w.LayerRange()
	weights := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
	moments := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}, Metadata: map[string]string{}}
	holders := fileHolders(*m)
	done := map[string]bool{}
	// Files of this worker's own replica go last, so its moments win where replicas'
	// differ (DiLoCo's inner optimizers); any replica's serve under a plan without it.
	files := slices.Clone(m.Files)
	sort.SliceStable(files, func(a, b int) bool {
		return files[a].Replica != w.Replica() && files[b].Replica == w.Replica()
	})
	for _, f := range files {
		if f.Layers[1] < first || f.Layers[0] >= last || done[f.Hash] {
			continue
		}
		done[f.Hash] = true
		tf, err := e.n.fetchTensors(ctx, f.Hash, holders[f.Hash])
		if err != nil {
			return err
		}
		dst := weights
		if f.Kind == ckptOptimizer {
			dst = moments
			moments.Metadata = tf.Metadata
		}
		for k, v := range tf.Tensors {
			dst.Tensors[k] = v
		}
	}
	return w.Restore(weights, moments, step)
}

// fileHolders maps each file hash of a manifest to the nodes that hold it.
func fileHolders(m consensus.CheckpointManifest) map[string][]peer.ID {
	out := map[string][]peer.ID{}
	for _, f := range m.Files {
		if p, err := peer.Decode(f.Node); err == nil {
			out[f.Hash] = append(out[f.Hash], p)
		}
	}
	return out
}

// fetchBlob makes sure this node holds a checkpoint file, fetching it from its holders
// (then any live peer) and verifying it if not.
func (n *Node) fetchBlob(ctx context.Context, hash string, holders []peer.ID) error {
	n.pins.pin(hash)
	if n.Blobs().Has(hash) {
		return nil
	}
	if err := n.Blobs().Fetch(ctx, hash, holders); err != nil {
		return fmt.Errorf("fetch checkpoint file %s from %v: %w", hash, holders, err)
	}
	return nil
}

// fetchTensors returns a checkpoint file's tensors, fetching the blob first if needed and
// checking its bytes against the hash before decoding: a local copy that no longer
// matches (disk corruption) is deleted and fetched again from the holders, and a file no
// holder serves intact is an error naming it, never loaded.
func (n *Node) fetchTensors(ctx context.Context, hash string, holders []peer.ID) (*model.TensorFile, error) {
	store := n.Blobs().Store()
	if err := n.fetchBlob(ctx, hash, holders); err != nil {
		return nil, err
	}
	b, err := store.ReadVerified(hash)
	if errors.Is(err, blob.ErrCorrupt) {
		n.log.Warn("checkpoint file corrupt on this node; fetching it again", "hash", hash)
		if err = store.Remove(hash); err == nil {
			self := n.ID()
			others := slices.DeleteFunc(slices.Clone(holders), func(p peer.ID) bool { return p == self })
			if err = n.fetchBlob(ctx, hash, others); err == nil {
				b, err = store.ReadVerified(hash)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint file %s: %w", hash, err)
	}
	return model.DecodeSafetensors(b)
}
