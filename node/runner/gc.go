package runner

import (
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/scheduler"
)

// blobPins are checkpoint files recently written or fetched, by hash.
type blobPins struct {
	pinFor time.Duration

	mu   sync.Mutex
	pins map[string]time.Time
}

// pin protects a blob from pruning for pinFor from now.
func (p *blobPins) pin(hash string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pins == nil {
		p.pins = map[string]time.Time{}
	}
	p.pins[hash] = time.Now()
}

// pinned reports whether hash was pinned less than pinFor ago, forgetting pins that have
// expired.
func (p *blobPins) pinned(hash string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.pins[hash]
	if ok && time.Since(at) >= p.pinFor {
		delete(p.pins, hash)
		ok = false
	}
	return ok
}

// pruneCheckpointBlobs deletes from this node's blob store the checkpoint files that no
// job needs any more (scheduler.RetainedCheckpoints) and that were not pinned lately. The
// step directories in the data dir are pruned by their writer (pruneCheckpoints); this
// frees the blobs, which otherwise grow by a checkpoint every checkpoint.every steps for
// as long as the node runs.
func (r *Runner) pruneCheckpointBlobs(jobs []consensus.Job) {
	if time.Since(r.pruned) < r.cfg.PruneEvery {
		return
	}
	r.pruned = time.Now()
	_, drop := scheduler.RetainedCheckpoints(JobViews(jobs))
	var files int
	var bytes int64
	for h := range drop {
		if !r.cfg.Blobs.Has(h) || r.pins.pinned(h) {
			continue
		}
		size, err := r.cfg.Blobs.Size(h)
		if err != nil {
			r.log.Debug("size of a checkpoint file to prune", "hash", h, "err", err)
		}
		if err := r.cfg.Blobs.Remove(h); err != nil {
			r.log.Warn("prune checkpoint file", "hash", h, "err", err)
			continue
		}
		files++
		bytes += size
	}
	if files > 0 {
		r.log.Info("pruned checkpoint files no job needs", "files", files, "bytes", bytes)
	}
}
