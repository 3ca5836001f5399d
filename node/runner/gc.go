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
	r.sweepOrphans(jobs)
}

// referencedBlobs are the blobs some job still needs: the files of retained checkpoints,
// every job's dataset and initial weights (model.init), and the blobs a sharded dataset's
// manifest lists (parts).
func referencedBlobs(jobs []consensus.Job, parts func(blob string) []string) map[string]bool {
	keep, _ := scheduler.RetainedCheckpoints(JobViews(jobs))
	for _, j := range jobs {
		if j.Spec.Data.Blob != "" {
			keep[j.Spec.Data.Blob] = true
			if j.Spec.Data.TrainShards > 0 {
				for _, p := range parts(j.Spec.Data.Blob) {
					keep[p] = true
				}
			}
		}
		if j.Spec.Model.InitBlob != "" {
			keep[j.Spec.Model.InitBlob] = true
		}
	}
	return keep
}

// sweepOrphans deletes the blobs no job references that have been held for longer than
// OrphanAge, that this runner has seen unreferenced for OrphanAge too, and that were not
// pinned lately (garbage collection by reference: what the control plane's jobs reach is
// live, the rest is garbage once old). The second clock protects a node whose FSM is
// behind (just restarted from an old snapshot, not yet caught up): its view may lack jobs
// whose blobs it holds, and nothing is deleted until it has looked for an OrphanAge.
func (r *Runner) sweepOrphans(jobs []consensus.Job) {
	if r.cfg.OrphanAge <= 0 {
		return
	}
	held, err := r.cfg.Blobs.List()
	if err != nil {
		r.log.Warn("list blobs to collect", "err", err)
		return
	}
	live := referencedBlobs(jobs, r.cfg.Datasets.DatasetParts)
	if r.unreferenced == nil {
		r.unreferenced = map[string]time.Time{}
	}
	seen := map[string]bool{}
	var n int
	var bytes int64
	for _, b := range held {
		if live[b.Hash] || r.pins.pinned(b.Hash) {
			continue
		}
		seen[b.Hash] = true
		since, ok := r.unreferenced[b.Hash]
		if !ok {
			r.unreferenced[b.Hash] = time.Now()
			continue
		}
		if time.Since(since) < r.cfg.OrphanAge || time.Since(b.StoredAt) < r.cfg.OrphanAge {
			continue
		}
		if err := r.cfg.Blobs.Remove(b.Hash); err != nil {
			r.log.Warn("remove a blob no job references", "hash", b.Hash, "err", err)
			continue
		}
		n++
		bytes += b.Size
	}
	for h := range r.unreferenced {
		if !seen[h] {
			delete(r.unreferenced, h) // referenced again, pinned, or gone
		}
	}
	if n > 0 {
		r.log.Info("removed blobs no job references", "blobs", n, "bytes", bytes)
	}
}
