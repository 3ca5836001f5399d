package node

import (
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus"
)

// checkpointPinFor is how long a checkpoint file this node has just written, fetched or
// agreed to hold is safe from pruning, whatever the manifests say: long enough for its
// manifest to be committed. Training is deterministic, so a job that resumes from an older
// checkpoint writes files identical to ones an old manifest lists, and those must not be
// pruned between their publication and the commit of the manifest that names them again.
var checkpointPinFor = 5 * time.Minute

// pruneInterval is how often a node looks for checkpoint files it may delete.
const pruneInterval = 10 * time.Second

// blobPins are checkpoint files recently written or fetched, by hash.
type blobPins struct {
	mu   sync.Mutex
	pins map[string]time.Time
}

// pin protects a blob from pruning for checkpointPinFor from now.
func (p *blobPins) pin(hash string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pins == nil {
		p.pins = map[string]time.Time{}
	}
	p.pins[hash] = time.Now()
}

// pinned reports whether hash was pinned less than checkpointPinFor ago, forgetting pins
// that have expired.
func (p *blobPins) pinned(hash string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.pins[hash]
	if ok && time.Since(at) >= checkpointPinFor {
		delete(p.pins, hash)
		ok = false
	}
	return ok
}

// neededCheckpoints reports, for each of the job's checkpoints, whether its files are
// kept: those of its newest checkpoint.keep checkpoints and of its latest complete one (a
// recovery resumes from it and `meshnode export` assembles it), whatever its status.
func neededCheckpoints(j consensus.Job) []bool {
	newest := len(j.Checkpoints) - max(1, j.Spec.Checkpoint.Keep)
	complete, ok := completeCheckpoint(j, modelConfig(j.Spec).NumLayers(), nil)
	needed := make([]bool, len(j.Checkpoints))
	for i, m := range j.Checkpoints {
		needed[i] = i >= newest || ok && m.Epoch == complete.Epoch && m.Step == complete.Step
	}
	return needed
}

// retainedCheckpoints splits the checkpoint files the jobs list into those some job still
// needs (neededCheckpoints) and those none does. A file is content-addressed: one that any
// job needs is kept for all.
func retainedCheckpoints(jobs []consensus.Job) (keep, drop map[string]bool) {
	keep, drop = map[string]bool{}, map[string]bool{}
	for _, j := range jobs {
		needed := neededCheckpoints(j)
		for i, m := range j.Checkpoints {
			for _, f := range m.Files {
				if needed[i] {
					keep[f.Hash] = true
				} else {
					drop[f.Hash] = true
				}
			}
		}
	}
	for h := range keep {
		delete(drop, h)
	}
	return keep, drop
}

// pruneCheckpointBlobs deletes from this node's blob store the checkpoint files that no
// job needs any more (retainedCheckpoints) and that were not pinned lately. The step
// directories in the data dir are pruned by their writer (pruneCheckpoints); this frees
// the blobs, which otherwise grow by a checkpoint every checkpoint.every steps for as long
// as the node runs.
func (e *engine) pruneCheckpointBlobs(jobs []consensus.Job) {
	if time.Since(e.pruned) < pruneInterval {
		return
	}
	e.pruned = time.Now()
	_, drop := retainedCheckpoints(jobs)
	store := e.n.Blobs().Store()
	var files int
	var bytes int64
	for h := range drop {
		if !store.Has(h) || e.n.pins.pinned(h) {
			continue
		}
		var size int64
		if m, err := store.Manifest(h); err == nil {
			size = m.Size
		}
		if err := store.Remove(h); err != nil {
			e.n.log.Warn("prune checkpoint file", "hash", h, "err", err)
			continue
		}
		files++
		bytes += size
	}
	if files > 0 {
		e.n.log.Info("pruned checkpoint files no job needs", "files", files, "bytes", bytes)
	}
}
