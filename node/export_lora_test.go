package node

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// TestExportOfALoRAJobIsItsMergedModel: a LoRA job's export rebuilds the base its workers
// trained on (the seed's) and answers the merged weights: a plain model with the trained
// adapted model's loss.
func TestExportOfALoRAJobIsItsMergedModel(t *testing.T) {
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Family: jobspec.FamilyLlama, Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Context: 16, Vocab: 256}
	spec.Train.Seed, spec.Train.LoRA = 3, &jobspec.LoRA{Rank: 4, Targets: []string{"q", "v", "down"}}
	cfg := model.Config(spec.Model)

	tc := parallel.DefaultTrainConfig() // as node/runner builds a worker's
	tc.Model, tc.Seed, tc.LoRA, tc.Batch, tc.Steps, tc.Warmup, tc.LR, tc.EvalWindows = cfg, spec.Train.Seed, spec.Train.LoRA, 2, 3, 1, 3e-2, 2
	text := []byte(strings.Repeat("func main() { fmt.Println(42) }\n", 60))
	tr, err := parallel.NewTrainer(tc, &model.Dataset{Source: "t", Train: model.ByteTokens(text), Val: model.ByteTokens(text), Vocab: 256})
	if err != nil {
		t.Fatal(err)
	}
	for tr.StepsDone() < tc.Steps {
		if _, err := tr.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	adapters := &model.TensorFile{Tensors: model.ParamTensors(tr.Model().Params())}
	b, err := exportLoRA(consensus.Job{ID: "j1", Spec: spec}, cfg, 3, adapters)
	if err != nil {
		t.Fatal(err)
	}
	tf, err := model.DecodeSafetensors(b)
	if err != nil {
		t.Fatal(err)
	}
	plain := model.New(cfg, 0)
	if err := model.LoadParams(tf, plain.Params()); err != nil {
		t.Fatal(err)
	}
	mb := &model.Batch{B: 1, T: 16, Inputs: make([]int32, 16), Targets: make([]int32, 16)}
	for i := range mb.Inputs {
		mb.Inputs[i], mb.Targets[i] = int32(text[i]), int32(text[i+1])
	}
	want, got := model.Loss(&model.Workspace{}, tr.Model().Layers, mb), model.Loss(&model.Workspace{}, plain.Layers, mb)
	if math.Abs(float64(got-want)) > 1e-5*float64(want) {
		t.Fatalf("the exported model's loss is %v, the trained LoRA model's %v", got, want)
	}
	if tf.Metadata["job"] != "j1" || tf.Metadata["step"] != "3" {
		t.Fatalf("metadata %v", tf.Metadata)
	}
}
