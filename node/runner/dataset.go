package runner

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/scheduler"
	"github.com/meshnode/meshnode/tokenizer"
)

// replicaShards is the training shards the plan assigns to self's replica (data_shards);
// nil when the plan assigns none (a dataset of one blob) or self is in no replica.
func replicaShards(jp scheduler.JobPlan, self string) []int {
	for r, stages := range jp.Replicas {
		for _, st := range stages {
			if st.Node == self && r < len(jp.DataShards) {
				return jp.DataShards[r]
			}
		}
	}
	return nil
}

// dataset returns the job's corpus: the blob its submitting node published (fetched from
// a holder and verified if this node lacks it), the local dataset this node exposes under
// data.local, or, for a job submitted without either (straight through the consensus
// API), the corpus read locally.
func (r *Runner) dataset(ctx context.Context, j consensus.Job, jp scheduler.JobPlan) (*model.Dataset, error) {
	if blob := j.Spec.Data.Blob; blob != "" {
		return r.cfg.Datasets.LoadDataset(ctx, blob, replicaShards(jp, r.cfg.Self))
	}
	if name := j.Spec.Data.Local; name != "" {
		return r.cfg.Datasets.LoadLocalDataset(ctx, name, j.Spec.Model.Vocab)
	}
	key := j.Spec.Data.Source + "|" + j.Spec.Data.Train + "|" + j.Spec.Data.Val + "|" + j.Spec.Data.Tokenizer + "|" + j.Spec.Data.TextField
	r.mu.Lock()
	ds := r.datasets[key]
	r.mu.Unlock()
	if ds != nil {
		return ds, nil
	}
	src := j.Spec.Data.Source
	if src == "" {
		src = j.Spec.Data.Train
	}
	opt := model.TextOptions{TextField: j.Spec.Data.TextField, EndOfText: -1}
	if path := j.Spec.Data.Tokenizer; path != "" {
		tok, err := tokenizer.Load(path)
		if err != nil {
			return nil, fmt.Errorf("%w: data.tokenizer: %v", model.ErrBadData, err)
		}
		opt.Encoder = tok
		if id, ok := tok.EndOfText(); ok {
			opt.EndOfText = int(id)
		}
	}
	ds, err := model.LoadDatasetWith(src, j.Spec.Model.Vocab, opt)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.datasets[key] = ds
	r.mu.Unlock()
	return ds, nil
}
