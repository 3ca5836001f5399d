package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// writeCheckpoint writes a stage's snapshot to the node's data dir (temp file, fsync,
// rename), publishes both files as blobs so any node can fetch them by hash, has another
// node of the plan fetch and verify them (replicate on commit: a checkpoint in the
// manifest outlives its writer), and only then commits them to the job's manifest of
// that step, with both holders. It runs off the training goroutine.
func (r *Runner) writeCheckpoint(ctx context.Context, jobID string, epoch uint64, jp scheduler.JobPlan, keep int, s parallel.StageState) error {
	dir := filepath.Join(r.cfg.DataDir, "checkpoints", jobID, "step-"+strconv.Itoa(s.Step))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoint dir: %w", err)
	}
	start := time.Now()
	files, err := r.storeStage(ctx, dir, s)
	if err != nil {
		return err
	}
	r.cfg.Metrics.ObserveCheckpointWrite(jobID, time.Since(start))
	// A plan of one node has nowhere to copy to: that is its nature, not a fault to warn of.
	if len(slices.Compact(jp.Nodes())) > 1 {
		start = time.Now()
		if to, err := r.replicateFiles(ctx, jp, files); err == nil {
			r.cfg.Metrics.ObserveCheckpointReplication(jobID, time.Since(start))
			for _, f := range files[:len(files):len(files)] {
				f.Node = to
				files = append(files, f)
			}
		} else if ctx.Err() == nil {
			r.log.Warn("checkpoint has one holder", "job", jobID, "step", s.Step, "err", err)
		}
	}
	m := consensus.CheckpointManifest{Epoch: epoch, Step: s.Step, Time: time.Now().UTC(), Files: files}
	if err := r.cfg.Control.AddCheckpoint(ctx, jobID, m); err != nil {
		return fmt.Errorf("commit checkpoint of step %d: %w", s.Step, err)
	}
	return pruneCheckpoints(filepath.Dir(dir), keep)
}

// storeStage writes the stage's weights and moments as two safetensors files in dir and
// publishes them as blobs, pinned; it returns the files with this node as their holder.
func (r *Runner) storeStage(ctx context.Context, dir string, s parallel.StageState) ([]consensus.CheckpointFile, error) {
	base := fmt.Sprintf("layers-%d-%d", s.First, s.Last)
	meta := map[string]string{"step": strconv.Itoa(s.Step)}
	var files []consensus.CheckpointFile
	for _, f := range []struct {
		kind    string
		tensors map[string]*kernels.Tensor
		meta    map[string]string
	}{{scheduler.FileModel, s.Model, meta}, {scheduler.FileOptimizer, s.Optimizer, s.OptimizerMeta}} {
		var buf bytes.Buffer
		if err := model.EncodeSafetensors(&buf, f.tensors, f.meta); err != nil {
			return nil, fmt.Errorf("encode %s checkpoint: %w", f.kind, err)
		}
		path := filepath.Join(dir, base+"."+f.kind+".safetensors")
		if r.cfg.CrashInCheckpoint == s.Step {
			crashWriting(path, buf.Bytes())
		}
		if err := model.WriteFileAtomic(path, buf.Bytes()); err != nil {
			return nil, err
		}
		r.pins.pin(r.cfg.Blobs.IDOf(buf.Bytes()))
		id, err := r.cfg.Blobs.Publish(ctx, buf.Bytes())
		if err != nil {
			return nil, fmt.Errorf("publish %s: %w", path, err)
		}
		files = append(files, consensus.CheckpointFile{Kind: f.kind, Node: r.cfg.Self,
			Layers: [2]int{s.First, s.Last - 1}, Hash: id, Bytes: int64(buf.Len()), Replica: s.Replica})
	}
	return files, nil
}

// crashWriting writes half of data where model.WriteFileAtomic would stage path, makes it
// durable, and ends the process at once, running nothing deferred, as a crash or power cut
// would. It is only reached through Config.CrashInCheckpoint, a fault-injection hook of
// tests that exec nodes.
func crashWriting(path string, data []byte) {
	if f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*"); err == nil {
		f.Write(data[:len(data)/2])
		f.Sync()
	}
	os.Exit(137)
}

// replicaHedge is how long a checkpoint's copy to one node may take before the next node
// of the ring is asked as well: a node that died and is not known dead yet must not hold
// the checkpoint (and so, through the update gate, the job) for the blob protocol's
// request timeout.
const replicaHedge = time.Second

// replicateFiles has one other node of the plan fetch every file, asking them in ring
// order from this node's place in the plan (so the stages' copies spread), and returns
// the node that now holds them all. A node that refuses passes the turn to the next; one
// that has not answered within replicaHedge gets the next asked beside it, and the first
// to hold every file wins (the others are cancelled). It fails when the plan has no other
// node or none took the files.
func (r *Runner) replicateFiles(ctx context.Context, jp scheduler.JobPlan, files []consensus.CheckpointFile) (string, error) {
	self := r.cfg.Self
	nodes := slices.Compact(jp.Nodes())
	at := slices.Index(nodes, self)
	var targets []string
	for i := 1; i < len(nodes); i++ {
		if to := nodes[(at+i)%len(nodes)]; to != self {
			targets = append(targets, to)
		}
	}
	if len(targets) == 0 {
		return "", errors.New("no other node in the plan")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		to  string
		err error
	}
	results := make(chan result, len(targets))
	next, running := 0, 0
	ask := func() {
		if next == len(targets) {
			return
		}
		to := targets[next]
		next, running = next+1, running+1
		go func() { results <- result{to, r.replicateTo(ctx, to, files)} }()
	}
	hedge := time.NewTicker(replicaHedge)
	defer hedge.Stop()
	ask()
	var err error
	for running > 0 {
		select {
		case res := <-results:
			running--
			if res.err == nil {
				return res.to, nil
			}
			err = res.err
			r.log.Info("checkpoint replica refused", "to", res.to, "err", err)
			ask()
		case <-hedge.C:
			ask()
		}
	}
	return "", err
}

// replicateTo has node to fetch every file.
func (r *Runner) replicateTo(ctx context.Context, to string, files []consensus.CheckpointFile) error {
	for _, f := range files {
		if err := r.cfg.Blobs.Replicate(ctx, to, f.Hash); err != nil {
			return err
		}
	}
	return nil
}

// pruneCheckpoints deletes all but the newest keep step-N directories under jobDir.
func pruneCheckpoints(jobDir string, keep int) error {
	entries, err := os.ReadDir(jobDir)
	if err != nil {
		return fmt.Errorf("prune checkpoints: %w", err)
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
			return fmt.Errorf("prune checkpoints: %w", err)
		}
	}
	return nil
}
