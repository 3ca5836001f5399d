package node

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// TestTokenizedJobTrainsAndServesItsTokenizer: a job on a directory of text files with
// data.tokenizer, model.vocab left to the tokenizer, trains on a three-node mesh (its validation
// loss falls), and GET /v1/jobs/{id}/tokenizer answers the very tokenizer.json it used.
func TestTokenizedJobTrainsAndServesItsTokenizer(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model on three in-process nodes")
	}
	nodes := startEngineMesh(t, 3)
	docs, _, tokPath, tok := textCorpus(t, t.TempDir())
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32}
	spec.Data = jobspec.Data{Source: docs, Tokenizer: tokPath}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 12, 8, jobspec.Fixed(2), 6, 2
	spec.Parallel.Replicas, spec.Parallel.InnerSteps = jobspec.Fixed(1), 4
	spec.Placement.Strategy = jobspec.StrategySky
	id := submitThroughAPI(t, nodes[1], spec)
	var job consensus.Job
	testutil.WaitFor(t, 90*time.Second, "the job to finish", func() bool {
		var err error
		job, _, err = nodes[0].Consensus().Job(context.Background(), id, false)
		return err == nil && job.Status.Terminal()
	})
	if job.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", job.Status, job.Events)
	}
	if job.Spec.Model.Vocab != tok.VocabSize() {
		t.Fatalf("the job's model.vocab is %d, want the tokenizer's %d", job.Spec.Model.Vocab, tok.VocabSize())
	}
	checkPlanAndLosses(t, job)
	want, _ := os.ReadFile(tokPath)
	got, err := testClient(t, nodes[0]).Tokenizer(context.Background(), id)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("GET tokenizer: %d bytes, %v; want the %d of %s", len(got), err, len(want), tokPath)
	}
	// A byte-level job has none: 404.
	spec.Data = jobspec.Data{Source: writeCorpus(t, "func f() {}\n", 400)}
	spec.Model.Vocab, spec.Train.Steps, spec.Train.Warmup = 256, 1, 0
	id = submitThroughAPI(t, nodes[1], spec)
	if _, err := testClient(t, nodes[0]).Tokenizer(context.Background(), id); api.StatusCode(err) != 404 {
		t.Fatalf("GET tokenizer of a byte-level job: %v, want a 404", err)
	}
}
