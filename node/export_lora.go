package node

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/model"
)

// exportLoRA is the export of a LoRA job (train.lora): its checkpoints hold the adapters
// alone, and its base is its seed's initialisation (a job names no init checkpoint), so
// the base is rebuilt as the job's workers built it, the checkpoint's adapters are loaded
// onto it, and the merged weights are answered: one plain model that generate loads.
func exportLoRA(j consensus.Job, cfg model.Config, step int, adapters *model.TensorFile) ([]byte, error) {
	seed := j.Spec.Train.Seed
	layers, err := model.WithLoRA(cfg, model.NewLayers(cfg, seed, 0, cfg.NumLayers()), *j.Spec.Train.LoRA, seed)
	if err != nil {
		return nil, fmt.Errorf("train.lora of job %s: %w", j.ID, err)
	}
	if err := model.LoadParams(adapters, model.LayerParams(layers)); err != nil {
		return nil, fmt.Errorf("checkpoint of step %d: %w", step, err)
	}
	meta := cfg.Metadata()
	meta["step"] = strconv.Itoa(step)
	meta["job"] = j.ID
	var buf bytes.Buffer
	if err := model.EncodeSafetensors(&buf, model.MergedWeights(layers), meta); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
