package runner

import (
	"context"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
)

// dataset returns the job's corpus: the blob its submitting node published (fetched from
// a holder and verified if this node lacks it), or, for a job submitted without one
// (straight through the consensus API), the corpus read locally.
func (r *Runner) dataset(ctx context.Context, j consensus.Job) (*model.Dataset, error) {
	if blob := j.Spec.Data.Blob; blob != "" {
		return r.cfg.Datasets.LoadDataset(ctx, blob)
	}
	key := j.Spec.Data.Source + "|" + j.Spec.Data.Train + "|" + j.Spec.Data.Val
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
	ds, err := model.LoadDataset(src, j.Spec.Model.Vocab)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.datasets[key] = ds
	r.mu.Unlock()
	return ds, nil
}
