package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// restoreWorker loads the layers a worker holds from the checkpoint of step, fetching
// (and verifying) the files it lacks from the nodes that hold them.
func (r *Runner) restoreWorker(ctx context.Context, j consensus.Job, w *parallel.Worker, step int) error {
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
	holders := FileHolders(*m)
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
		tf, err := r.FetchTensors(ctx, f.Hash, holders[f.Hash])
		if err != nil {
			return err
		}
		dst := weights
		if f.Kind == scheduler.FileOptimizer {
			dst = moments
			moments.Metadata = tf.Metadata
		}
		for k, v := range tf.Tensors {
			dst.Tensors[k] = v
		}
	}
	return w.Restore(weights, moments, step)
}

// FileHolders maps each file hash of a manifest to the nodes that hold it.
func FileHolders(m consensus.CheckpointManifest) map[string][]string {
	out := map[string][]string{}
	for _, f := range m.Files {
		out[f.Hash] = append(out[f.Hash], f.Node)
	}
	return out
}

// fetchBlob makes sure this node holds a checkpoint file, fetching it from its holders
// (then any live peer) and verifying it if not.
func (r *Runner) fetchBlob(ctx context.Context, hash string, holders []string) error {
	r.pins.pin(hash)
	if r.cfg.Blobs.Has(hash) {
		return nil
	}
	if err := r.cfg.Blobs.Fetch(ctx, hash, holders); err != nil {
		return fmt.Errorf("fetch checkpoint file %s from %v: %w", hash, holders, err)
	}
	return nil
}

// FetchTensors returns a checkpoint file's tensors, fetching the blob first if needed and
// checking its bytes against the hash before decoding: a local copy that no longer
// matches (disk corruption) is deleted and fetched again from the holders, and a file no
// holder serves intact is an error naming it, never loaded.
func (r *Runner) FetchTensors(ctx context.Context, hash string, holders []string) (*model.TensorFile, error) {
	if err := r.fetchBlob(ctx, hash, holders); err != nil {
		return nil, err
	}
	b, err := r.cfg.Blobs.ReadVerified(hash)
	if errors.Is(err, ErrBlobCorrupt) {
		r.log.Warn("checkpoint file corrupt on this node; fetching it again", "hash", hash)
		if err = r.cfg.Blobs.Remove(hash); err == nil {
			others := slices.DeleteFunc(slices.Clone(holders), func(p string) bool { return p == r.cfg.Self })
			if err = r.fetchBlob(ctx, hash, others); err == nil {
				b, err = r.cfg.Blobs.ReadVerified(hash)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint file %s: %w", hash, err)
	}
	return model.DecodeSafetensors(b)
}

// initFile is model.init's blob as a file under the data directory (written once, from the
// verified blob), for a LoRA job whose stages read their frozen base from a path.
func (r *Runner) initFile(ctx context.Context, blob string) (string, error) {
	path := filepath.Join(r.cfg.DataDir, "init", blob+".safetensors")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := r.fetchBlob(ctx, blob, nil); err != nil {
		return "", fmt.Errorf("initial weights (model.init): %w", err)
	}
	b, err := r.cfg.Blobs.ReadVerified(blob)
	if err != nil {
		return "", fmt.Errorf("initial weights (model.init) %s: %w", blob, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := model.WriteFileAtomic(path, b); err != nil {
		return "", fmt.Errorf("initial weights (model.init) %s: %w", blob, err)
	}
	return path, nil
}

// startFromInit loads a job's initial weights (model.init, published by the submitting
// node as one blob of every parameter) into a worker at step 0, with the optimizer of a
// run that has not stepped: the worker starts from them exactly as from its own
// initialisation. The blob is fetched by hash and verified like a checkpoint file.
func (r *Runner) startFromInit(ctx context.Context, w *parallel.Worker, blob string, cfg model.Config) error {
	tf, err := r.FetchTensors(ctx, blob, nil)
	if err != nil {
		return fmt.Errorf("initial weights (model.init): %w", err)
	}
	if err := w.Restore(tf, parallel.InitialMoments(cfg), 0); err != nil {
		return fmt.Errorf("initial weights (model.init) %s: %w", blob, err)
	}
	return nil
}
