package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/node/runner"
	"github.com/meshnode/meshnode/scheduler"
)

// CheckpointView is one element of GET /v1/jobs/{id}/checkpoints (api.CheckpointView).
type CheckpointView = api.CheckpointView

// exportRoutes adds the checkpoint listing and the export of a job's weights.
func (n *Node) exportRoutes() {
	n.Handle("GET /v1/jobs/{id}/checkpoints", http.HandlerFunc(n.serveCheckpoints))
	n.Handle("GET /v1/jobs/{id}/export", http.HandlerFunc(n.serveExport))
	n.Handle("GET /v1/jobs/{id}/tokenizer", http.HandlerFunc(n.serveTokenizer))
}

func (n *Node) jobForAPI(w http.ResponseWriter, r *http.Request) (consensus.Job, bool) {
	c := n.Consensus()
	if c == nil {
		replyError(w, http.StatusServiceUnavailable, errors.New("the control plane is not running on this node"))
		return consensus.Job{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), jobAPITimeout)
	defer cancel()
	j, _, err := c.Job(ctx, r.PathValue("id"), false)
	if err != nil {
		replyError(w, statusOf(err), err)
		return consensus.Job{}, false
	}
	return j, true
}

func (n *Node) serveCheckpoints(w http.ResponseWriter, r *http.Request) {
	j, ok := n.jobForAPI(w, r)
	if !ok {
		return
	}
	L := scheduler.ModelConfig(j.Spec).NumLayers()
	needed := scheduler.NeededCheckpoints(runner.JobView(j))
	out := []CheckpointView{}
	for i, m := range j.Checkpoints {
		complete := scheduler.CheckpointSurvives(runner.CheckpointView(m), L, nil)
		out = append(out, CheckpointView{CheckpointManifest: m, Complete: complete, Pruned: !needed[i]})
	}
	replyJSON(w, http.StatusOK, out)
}

// serveExport answers one safetensors file with every weight of the job's model under its
// GPT-2 name, assembled from a checkpoint's stage files (the latest complete one, or
// ?step=N), with the model's shape in the metadata so `meshnode generate` can load it.
func (n *Node) serveExport(w http.ResponseWriter, r *http.Request) {
	j, ok := n.jobForAPI(w, r)
	if !ok {
		return
	}
	step := -1
	if s := r.URL.Query().Get("step"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			replyError(w, http.StatusBadRequest, fmt.Errorf("step: not a step number: %q", s))
			return
		}
		step = v
	}
	b, err := n.exportCheckpoint(r.Context(), j, step)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, errNoCheckpoint) {
			code = http.StatusNotFound
		}
		replyError(w, code, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(b)
}

// serveTokenizer answers the tokenizer.json that travels in the job's dataset blob (404
// when the corpus was not encoded with one), so that generate decodes with the same ids.
func (n *Node) serveTokenizer(w http.ResponseWriter, r *http.Request) {
	j, ok := n.jobForAPI(w, r)
	if !ok {
		return
	}
	if (j.Spec.Data.Tokenizer == "" && j.Spec.Data.TrainShards == 0) || j.Spec.Data.Blob == "" {
		replyError(w, http.StatusNotFound, fmt.Errorf("job %s was not trained with a tokenizer (data.tokenizer): its text is bytes or .bin ids", j.ID))
		return
	}
	var ds *model.Dataset
	var err error
	if j.Spec.Data.TrainShards > 0 {
		ds, err = n.data.shardTokenizer(r.Context(), j.Spec.Data.Blob) // not the shards
	} else {
		ds, err = n.LoadDataset(r.Context(), j.Spec.Data.Blob, nil)
	}
	if err != nil {
		replyError(w, http.StatusInternalServerError, err)
		return
	}
	if ds.Tokenizer == nil {
		replyError(w, http.StatusNotFound, fmt.Errorf("job %s: its dataset blob holds no tokenizer", j.ID))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(ds.Tokenizer)
}

var errNoCheckpoint = errors.New("no complete checkpoint")

// exportCheckpoint assembles the weights of checkpoint step (< 0: the latest complete).
func (n *Node) exportCheckpoint(ctx context.Context, j consensus.Job, step int) ([]byte, error) {
	cfg := scheduler.ModelConfig(j.Spec)
	var m consensus.CheckpointManifest
	found, pruned := false, false
	needed := scheduler.NeededCheckpoints(runner.JobView(j))
	for i, c := range j.Checkpoints {
		if scheduler.CheckpointSurvives(runner.CheckpointView(c), cfg.NumLayers(), nil) && (step < 0 || c.Step == step) {
			if !needed[i] {
				pruned = true
				continue
			}
			m, found = c, true
		}
	}
	if !found {
		if step >= 0 && pruned {
			return nil, fmt.Errorf("%w of job %s at step %d: it was pruned (older than the newest checkpoint.keep = %d); `meshnode job checkpoints %s` lists the kept ones",
				errNoCheckpoint, j.ID, step, j.Spec.Checkpoint.Keep, j.ID)
		}
		if step >= 0 {
			return nil, fmt.Errorf("%w of job %s at step %d", errNoCheckpoint, j.ID, step)
		}
		return nil, fmt.Errorf("%w of job %s yet", errNoCheckpoint, j.ID)
	}
	if n.engine == nil {
		return nil, errNoConsensus
	}
	holders := runner.FileHolders(m)
	merged := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
	done := map[string]bool{}
	for _, f := range m.Files {
		if f.Kind != scheduler.FileModel || done[f.Hash] {
			continue
		}
		done[f.Hash] = true
		tf, err := n.engine.runner.FetchTensors(ctx, f.Hash, holders[f.Hash])
		if err != nil {
			return nil, err
		}
		for k, v := range tf.Tensors {
			merged.Tensors[k] = v
		}
	}
	if j.Spec.Train.LoRA != nil {
		return exportLoRA(j, cfg, m.Step, merged) // export_lora.go
	}
	g := model.New(cfg, 0)
	if err := model.LoadParams(merged, g.Params()); err != nil {
		return nil, fmt.Errorf("checkpoint of step %d: %w", m.Step, err)
	}
	meta := cfg.Metadata()
	meta["step"] = strconv.Itoa(m.Step)
	meta["job"] = j.ID
	var buf bytes.Buffer
	if err := model.EncodeSafetensors(&buf, model.ParamTensors(g.Params()), meta); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
