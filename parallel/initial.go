package parallel

import (
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// InitialMoments is the optimizer state of a run before its first step: zero moments for
// every parameter of cfg's model, at step 0. Restoring given weights with it at step 0
// (Trainer.Restore, Worker.Restore) starts a run from those weights, a Hugging Face
// model's (`meshnode train --init`, a job's model.init), exactly as a run starts from its
// own initialisation: the optimizer of a run that has not stepped holds zeros.
func InitialMoments(cfg model.Config) *model.TensorFile {
	params := model.LayerParams(model.NewLayerShells(cfg, 0, cfg.NumLayers()))
	t, meta := NewOptimizer(params, kernels.AdamW{}, 0).State()
	return &model.TensorFile{Tensors: t, Metadata: meta}
}
