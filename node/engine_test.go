package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/scheduler"
)

// TestJobRunsEndToEndOnThreeNodes: a job submitted to a three-node mesh is planned by the
// leader with the balancer, trained by the nodes the plan names over their data planes,
// reports progress with validation losses, and ends done with a lower loss than at step 0.
// Its nodes keep the files of its newest checkpoint.keep checkpoints and delete the
// older ones.
func TestJobRunsEndToEndOnThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model on three in-process nodes")
	}
	pinFor := checkpointPinFor
	checkpointPinFor = 0 // nodes may prune a file as soon as no manifest needs it
	t.Cleanup(func() { checkpointPinFor = pinFor })
	nodes := startEngineMesh(t, 3)
	first := nodes[0]
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "func (n *Node) Start(ctx context.Context) error { return nil }\n", 800)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 12, 8, jobspec.Fixed(2), 6, 2
	spec.Parallel.Replicas, spec.Parallel.InnerSteps = jobspec.Fixed(1), 4
	spec.Placement.Strategy = jobspec.StrategySky
	spec.Checkpoint.Every, spec.Checkpoint.Keep = 2, 2
	// Submit through node 1's API, as `meshnode submit` does: it publishes the corpus as a
	// blob that the planned nodes fetch and verify.
	id := submitThroughAPI(t, nodes[1], spec)
	var job consensus.Job
	testutil.WaitFor(t, 90*time.Second, "the job to finish", func() bool {
		var err error
		job, _, err = first.Consensus().Job(context.Background(), id, false)
		return err == nil && job.Status.Terminal()
	})
	if job.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", job.Status, job.Events)
	}
	checkPlanAndLosses(t, job)
	checkControlMetrics(t, first, id, spec.Train.Steps)
	checkTrainingMetrics(t, nodes, job)
	checkOldCheckpointsPruned(t, nodes, job)
}

// checkPlanAndLosses checks that a finished job's plan is the balancer's for the inputs it
// records, on at least two nodes, and that its validation loss fell.
func checkPlanAndLosses(t *testing.T, job consensus.Job) {
	t.Helper()
	var jp scheduler.JobPlan
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

// checkOldCheckpointsPruned checks that the nodes keep the files of a finished job's
// newest checkpoint.keep checkpoints and delete the older ones, and that the API says so.
func checkOldCheckpointsPruned(t *testing.T, nodes []*Node, job consensus.Job) {
	t.Helper()
	first, id, spec := nodes[0], job.ID, job.Spec
	// Checkpoints at steps 2, 4, …, 10: the nodes hold the files of the newest two, as
	// the manifests say, and none of the older ones.
	old := len(job.Checkpoints) - spec.Checkpoint.Keep
	if old < 2 {
		t.Fatalf("%d checkpoints, want 5 (every 2 steps before the last of 12)", len(job.Checkpoints))
	}
	kept := map[string]bool{}
	for _, m := range job.Checkpoints[old:] {
		for _, f := range m.Files {
			kept[f.Hash] = true
		}
	}
	testutil.WaitFor(t, 30*time.Second, "the nodes to prune the files of the older checkpoints", func() bool {
		for i, m := range job.Checkpoints {
			for _, f := range m.Files {
				for _, nd := range nodes {
					has := nd.Blobs().Has(f.Hash)
					if i < old && has && !kept[f.Hash] {
						return false
					}
					if i >= old && f.Node == nd.ID().String() && !has {
						t.Fatalf("node %s lost file %s of the step-%d checkpoint it holds", nd.ID(), f.Hash, m.Step)
					}
				}
			}
		}
		return true
	})
	var views []CheckpointView
	getJSON(t, first, "/v1/jobs/"+id+"/checkpoints", &views)
	for i, v := range views {
		if v.Pruned != (i < old) {
			t.Errorf("checkpoint at step %d: pruned %v", v.Step, v.Pruned)
		}
	}
	if _, err := first.exportCheckpoint(context.Background(), job, 2); err == nil || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("export of the pruned step 2: %v", err)
	}
}

// plannable counts the members nd's scheduler may plan on: alive, with a usable profile.
func plannable(nd *Node) int {
	n := 0
	for _, m := range nd.members() {
		if m.State == scheduler.MemberAlive && m.Profile != nil {
			n++
		}
	}
	return n
}

// startEngineMesh starts n in-process nodes that know each other and waits until each
// sees all n as plan candidates and a Raft leader exists.
func startEngineMesh(t *testing.T, n int) []*Node {
	t.Helper()
	first := startNode(t, testConfig(t))
	nodes := []*Node{first}
	for range n - 1 {
		nodes = append(nodes, startNode(t, testConfig(t, first.Status().Addrs...)))
	}
	testutil.WaitFor(t, 30*time.Second, "nodes alive with data-plane addresses, a leader and min(n, 3) voters", func() bool {
		for _, nd := range nodes {
			if nd.Consensus() == nil || nd.Consensus().Leader() == "" || plannable(nd) != n {
				return false
			}
		}
		// Joiners are promoted after their probation; a test that stops the leader needs
		// the others to be voters by then.
		st, err := nodes[0].Consensus().Status(context.Background())
		return err == nil && len(st.Voters) == min(n, 3)
	})
	return nodes
}

// writeCorpus writes line repeated times to a file and returns its path.
func writeCorpus(t *testing.T, line string, times int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(p, []byte(strings.Repeat(line, times)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// submitThroughAPI posts spec to the node's POST /v1/jobs and returns the job id.
func submitThroughAPI(t *testing.T, n *Node, spec jobspec.Spec) string {
	t.Helper()
	// A unique name lets a submission whose leader stepped down mid-write (it may or may
	// not be committed: a loaded machine, the race pass) be found rather than duplicated.
	if spec.Name = fmt.Sprintf("t%d-%s", submissions.Add(1), spec.Name); len(spec.Name) > 64 {
		spec.Name = spec.Name[:64]
	}
	body, _ := spec.Document()
	c := testClient(t, n)
	var id string
	testutil.WaitForErr(t, 30*time.Second, func() error {
		// The tests' corpora live under the temporary directory: it is the data root.
		got, err := c.Submit(context.Background(), body, os.TempDir())
		if err == nil {
			id = got
			return nil
		}
		if !strings.Contains(err.Error(), consensus.ErrLeadershipLost.Error()) {
			t.Fatalf("POST /v1/jobs: %v", err)
		}
		if jobs, lerr := c.Jobs(context.Background(), true); lerr == nil {
			for _, j := range jobs {
				if j.Name == spec.Name {
					id = j.ID
					return nil
				}
			}
		}
		return err
	})
	return id
}

// submissions numbers the jobs submitted through submitThroughAPI.
var submissions atomic.Int64

// TestDefaultTestnetJobIsCutBySpeed: the plan the leader makes for the default job on the
// default testnet's devices — speeds 1, 1, 1/2, 1/3 (slowdowns 1, 1, 2, 3), 20 MiB each
// (testnet.DefaultMemory), two regions 1 ms apart inside and 20 ms across at 100 Mbit/s —
// cuts every replica into a pipeline and gives the slower nodes fewer layers than the fast
// ones; the slowest node holds no more than any faster one.
func TestDefaultTestnetJobIsCutBySpeed(t *testing.T) {
	speeds := []float64{120, 120, 60, 40}
	regions := []string{"eu", "us", "eu", "us"}
	// fast-eu, fast-us, slow2-eu, slow3-us: links name real peer IDs (mesh.Profile.Validate)
	ids := []string{newPeerID(t), newPeerID(t), newPeerID(t), newPeerID(t)}
	var cands []scheduler.Member
	for i, id := range ids {
		p := &mesh.Profile{GemmGFLOPS: 3 * speeds[i], TrainGFLOPS: speeds[i], MemoryBudgetBytes: 20 << 20, DataAddr: "127.0.0.1:1"}
		for j, peer := range ids {
			if i == j {
				continue
			}
			l := mesh.ProfileLink{Peer: peer, RTTSeconds: 0.002, BandwidthBps: 1e9 / 8}
			if regions[i] != regions[j] {
				l = mesh.ProfileLink{Peer: peer, RTTSeconds: 0.040, BandwidthBps: 100e6 / 8}
			}
			p.Links = append(p.Links, l)
		}
		cands = append(cands, scheduler.Member{ID: id, State: scheduler.MemberAlive, Profile: planProfile(p)})
	}
	jp, err := scheduler.PlanJob(jobspec.DefaultSpec(), cands, schedulerConfig())
	if err != nil {
		t.Fatal(err)
	}
	layers := map[string]int{}
	for _, r := range jp.Replicas {
		if len(r) < 2 {
			t.Errorf("a replica of one stage on 20 MiB devices: %+v", jp.Replicas)
		}
		for _, s := range r {
			layers[s.Node] += s.Last - s.First
		}
	}
	t.Logf("plan %+v: layers per node %v", jp.Replicas, layers)
	for _, slow := range ids[2:] {
		for _, fast := range ids[:2] {
			if layers[slow] > 0 && layers[fast] > 0 && layers[slow] >= layers[fast] {
				t.Errorf("%s holds %d layers, %s %d", slow, layers[slow], fast, layers[fast])
			}
		}
	}
	if layers[ids[3]] > layers[ids[2]] && layers[ids[2]] > 0 {
		t.Errorf("the slowest node holds more layers (%d) than the slowdown-2 one (%d)", layers[ids[3]], layers[ids[2]])
	}
}
