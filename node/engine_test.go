package node

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestJobRunsEndToEndOnThreeNodes: a job submitted to a three-node mesh is planned by the
// leader with the balancer, trained by the nodes the plan names over their data planes,
// reports progress with validation losses, and ends done with a lower loss than at step 0.
func TestJobRunsEndToEndOnThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model on three in-process nodes")
	}
	first := startNode(t, testConfig(t))
	nodes := []*Node{first}
	for range 2 {
		nodes = append(nodes, startNode(t, testConfig(t, first.Status().Addrs...)))
	}
	waitFor(t, 20*time.Second, "three nodes alive with data-plane addresses and a leader", func() bool {
		for _, n := range nodes {
			if n.Consensus() == nil || n.Consensus().Leader() == "" || len(n.engineCandidates()) != 3 {
				return false
			}
		}
		return true
	})
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("func (n *Node) Start(ctx context.Context) error { return nil }\n", 800)), 0o644)
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: corpus}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 12, 8, 2, 6, 2
	spec.Parallel.Replicas, spec.Parallel.InnerSteps = jobspec.Fixed(1), 4
	spec.Placement.Strategy = jobspec.StrategySky
	// Submit through node 1's API, as `meshnode submit` does: it publishes the corpus as a
	// blob that the planned nodes fetch and verify.
	body, _ := json.Marshal(spec)
	resp, err := http.Post("http://"+nodes[1].APIAddr()+"/v1/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var submitted consensus.JobSummary
	json.NewDecoder(resp.Body).Decode(&submitted)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 || submitted.ID == "" {
		t.Fatalf("POST /v1/jobs: %s %+v", resp.Status, submitted)
	}
	id := submitted.ID
	var job consensus.Job
	waitFor(t, 90*time.Second, "the job to finish", func() bool {
		job, _, err = first.Consensus().Job(context.Background(), id, false)
		return err == nil && job.Status.Terminal()
	})
	if job.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", job.Status, job.Events)
	}
	var jp JobPlan
	if err := json.Unmarshal(job.CurrentPlan().Plan, &jp); err != nil {
		t.Fatal(err)
	}
	if job.Spec.Data.Blob == "" {
		t.Error("the submitting node published no dataset blob")
	}
	if len(jp.Nodes()) < 2 {
		t.Errorf("the plan uses %d node(s): %+v", len(jp.Nodes()), jp)
	}
	// The committed plan is the balancer's output for the measured inputs it records.
	if len(jp.Inputs.Snapshot.Nodes) != 3 || len(jp.Inputs.Snapshot.Links) == 0 {
		t.Errorf("plan inputs: %d nodes, %d links measured", len(jp.Inputs.Snapshot.Nodes), len(jp.Inputs.Snapshot.Links))
	}
	again, err := jp.Inputs.Replan()
	if err != nil {
		t.Fatal(err)
	}
	for r, rep := range again.Replicas {
		for s, st := range rep.Stages {
			if got := jp.Replicas[r][s]; got.Node != st.Node || got.First != st.First || got.Last != st.Last {
				t.Fatalf("committed stage %d.%d %+v, balancer gives %+v", r, s, got, st)
			}
		}
	}
	var vals []float64
	for _, s := range job.Progress {
		if s.ValLoss != nil {
			vals = append(vals, *s.ValLoss)
		}
	}
	if len(vals) < 2 || !(vals[len(vals)-1] < vals[0]) {
		t.Fatalf("validation losses %v: none, or not falling", vals)
	}
	t.Logf("plan %+v; validation loss %.3f → %.3f", jp.Replicas, vals[0], vals[len(vals)-1])
}
