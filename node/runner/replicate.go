package runner

import (
	"slices"
	"time"

	"github.com/meshnode/meshnode/consensus"
)

// replicate copies the files of a running job's latest complete checkpoint to this node
// if it runs a stage of the job, so that the checkpoint outlives the node that wrote any
// file of it. A copy that fails is tried again at a later Reconcile.
func (r *Runner) replicate(j consensus.Job) {
	r.mu.Lock()
	_, mine := r.runs[j.ID]
	r.mu.Unlock()
	if !mine || j.Status != consensus.JobRunning {
		return
	}
	m, ok := completeCheckpoint(j, nil)
	if !ok {
		return
	}
	self := r.cfg.Self
	holders := FileHolders(m)
	for _, f := range m.Files {
		// Blobs are content-addressed and training is deterministic, so another job may
		// have left this very file here already: the holder is still recorded per job.
		key := j.ID + "/" + f.Hash
		r.mu.Lock()
		skip := r.copied[key] || f.Node == self || slices.Contains(holders[f.Hash], self)
		r.copied[key] = true
		r.mu.Unlock()
		if skip {
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.copyFile(j.ID, m, f, holders[f.Hash], key)
		}()
	}
}

// copyFile fetches one checkpoint file and records this node as a further holder, so a
// restore survives the writer's loss.
func (r *Runner) copyFile(jobID string, m consensus.CheckpointManifest, f consensus.CheckpointFile, holders []string, key string) {
	err := r.fetchBlob(r.ctx, f.Hash, holders)
	if err == nil {
		cp := f
		cp.Node = r.cfg.Self
		err = r.cfg.Control.AddCheckpoint(r.ctx, jobID, consensus.CheckpointManifest{Epoch: m.Epoch, Step: m.Step, Time: time.Now().UTC(), Files: []consensus.CheckpointFile{cp}})
	}
	if err != nil && r.ctx.Err() == nil {
		r.log.Warn("replicate checkpoint file", "job", jobID, "hash", f.Hash, "err", err)
		r.mu.Lock()
		delete(r.copied, key) // try again at a later Reconcile
		r.mu.Unlock()
	}
}
