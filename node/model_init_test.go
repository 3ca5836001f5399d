package node

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// TestJobStartsFromModelInit: a job whose model.init is a Hugging Face directory takes its
// model from config.json and starts from its weights: the spec the control plane holds is
// the directory's model with an init blob, and the job's step-0 validation loss is the one
// those weights give on the corpus here (not the seed's initialisation's). A model.init
// that is not there, not a model, or with a file that leads outside the data roots is
// refused at submit with the reason.
func TestJobStartsFromModelInit(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model on an in-process node")
	}
	nodes := startEngineMesh(t, 1)
	cfg := model.Config{Family: jobspec.FamilyLlama, Layers: 1, DModel: 16, Heads: 2, Intermediate: 32, Context: 16, Vocab: 256}
	g := model.New(cfg, 99) // not the job's seed
	dir := filepath.Join(t.TempDir(), "hf")
	if err := model.WriteHF(dir, model.HFExport{Config: cfg, Weights: model.ParamTensors(g.Params())}); err != nil {
		t.Fatal(err)
	}
	corpus := writeCorpus(t, "func (n *Node) Join(ctx context.Context) error { return nil }\n", 200)
	// Trained as it is, and with LoRA adapters on it as the frozen base: B starts at zero,
	// so the step-0 loss is the base's either way.
	for _, lora := range []*jobspec.LoRA{nil, {Rank: 2, Targets: []string{"attn"}}} {
		spec := jobspec.DefaultSpec()
		// The model's other fields are the default GPT's, which config.json replaces; the
		// context is set shorter than its max_position_embeddings.
		spec.Model.Init, spec.Model.Context = dir, 8
		spec.Train.LoRA = lora
		spec.Data = jobspec.Data{Source: corpus}
		spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 2, 4, jobspec.Fixed(1), 2, 1
		spec.Parallel.Replicas, spec.Parallel.Stages, spec.Parallel.InnerSteps = jobspec.Fixed(1), jobspec.Fixed(1), 2
		id := submitThroughAPI(t, nodes[0], spec)
		var job consensus.Job
		testutil.WaitFor(t, 90*time.Second, "the job to finish", func() bool {
			var err error
			job, _, err = nodes[0].Consensus().Job(context.Background(), id, false)
			return err == nil && job.Status.Terminal()
		})
		if job.Status != consensus.JobDone {
			t.Fatalf("job ended %s; events %+v", job.Status, job.Events)
		}
		m := job.Spec.Model
		if m.Family != jobspec.FamilyLlama || m.DModel != 16 || m.Intermediate != 32 || m.Context != 8 || m.InitBlob == "" || m.Init != dir {
			t.Fatalf("the job's model %+v: want config.json's with an init blob", m)
		}
		var step0 *float64
		for _, s := range job.Progress {
			if s.Step == 0 && s.ValLoss != nil {
				step0 = s.ValLoss
			}
		}
		if step0 == nil {
			t.Fatalf("no step-0 validation loss: %+v", job.Progress)
		}
		short := cfg
		short.Context = 8
		want := initValLoss(t, short, corpus, g)
		if math.Abs(*step0-want) > 1e-5 {
			t.Fatalf("step-0 validation loss %.6f; the model.init weights give %.6f here", *step0, want)
		}
		t.Logf("lora %v: step-0 validation loss %.6f, model.init's weights %.6f", lora != nil, *step0, want)
	}

	spec := jobspec.DefaultSpec()
	spec.Data = jobspec.Data{Source: corpus}
	escape := filepath.Join(t.TempDir(), "escape")
	if err := os.CopyFS(escape, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(escape, "config.json"))
	if err := os.Symlink("/etc/passwd", filepath.Join(escape, "config.json")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		init    string
		context int
		want    string
	}{
		{escape, 0, "config.json leads outside the allowed data roots"},
		{dir, 32, "model.context: 32 is longer than model.init"},
		{filepath.Join(t.TempDir(), "nope"), 0, "does not exist on the submitting node"},
		{corpus, 0, "is not a directory"},
		{t.TempDir(), 0, "config.json: no such file or directory"},
	} {
		spec.Model.Init, spec.Model.Context = c.init, c.context
		body, _ := spec.Document()
		_, err := testClient(t, nodes[0]).Submit(context.Background(), body, os.TempDir())
		if err == nil || !strings.Contains(err.Error(), "model.") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("model.init %s: %v, want a refusal saying %q", c.init, err, c.want)
		}
	}
}

// initValLoss is the validation loss of g's weights on corpus as a job evaluates it.
func initValLoss(t *testing.T, cfg model.Config, corpus string, g *model.GPT) float64 {
	t.Helper()
	data, err := model.LoadDataset(corpus, cfg.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	tc := parallel.DefaultTrainConfig()
	tc.Model, tc.Batch, tc.Steps = cfg, 4, 2
	tr, err := parallel.NewTrainer(tc, data)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ck := &parallel.Checkpoint{Model: &model.TensorFile{Tensors: model.ParamTensors(g.Params())}, Optimizer: parallel.InitialMoments(cfg)}
	if err := tr.Restore(ck); err != nil {
		t.Fatal(err)
	}
	loss, err := tr.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return loss
}
