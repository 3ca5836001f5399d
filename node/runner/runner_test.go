package runner

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// smallSpec is a job small enough to train in a second: 20 steps of a 2-block model in
// sync mode, checkpoints every 5 steps, evaluation every 10, on a local text corpus.
func smallSpec(t *testing.T) jobspec.Spec {
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	text := strings.Repeat("package runner trains the stages a plan gives this node. ", 400)
	if err := os.WriteFile(corpus, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s := jobspec.DefaultSpec()
	s.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 16, Vocab: 256}
	s.Data = jobspec.Data{Source: corpus}
	s.Train = jobspec.Train{Steps: 20, Batch: 4, MicroBatches: jobspec.Fixed(2), LR: 1e-3, Warmup: 2, Seed: 3, EvalEvery: 10}
	s.Parallel.Sync, s.Parallel.Codec = jobspec.SyncEveryStep, jobspec.CodecNone
	s.Checkpoint = jobspec.Checkpoint{Every: 5, Keep: 2}
	return s
}

// twoStagePlan cuts the model of s into two stages, on a and b.
func twoStagePlan(s jobspec.Spec) scheduler.JobPlan {
	L := scheduler.ModelConfig(s).NumLayers()
	return scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "a", First: 0, Last: L / 2}, {Node: "b", First: L / 2, Last: L}}},
		Batches: []int{s.Train.Batch}, MicroBatches: s.Train.MicroBatches.N}
}

// cluster is a control plane and the runners of nodes a and b over one in-memory network.
type cluster struct {
	control *fsmControl
	mu      sync.Mutex // guards runners, which a test may replace while runUntil runs
	runners []*Runner
	net     *parallel.InMemory
	blobs   *memBlobs
}

func newCluster(t *testing.T) *cluster { return newClusterOf(t, "a", "b") }

// newClusterOf is a control plane and the runners of nodes ids over one in-memory network.
func newClusterOf(t *testing.T, ids ...string) *cluster {
	c := &cluster{control: &fsmControl{fsm: consensus.NewFSM(nil)}}
	c.net, c.blobs = parallel.NewInMemory(ids...), &memBlobs{stores: map[string]map[string][]byte{}}
	t.Cleanup(c.net.Close)
	for _, id := range ids {
		c.runners = append(c.runners, c.newRunner(t, id))
	}
	return c
}

// newRunner is a fresh runner of node id on the cluster's network (a restarted node).
func (c *cluster) newRunner(t *testing.T, id string) *Runner {
	r, err := New(Config{Self: id, DataDir: t.TempDir(), Log: testutil.Logger(t).With("node", id),
		Blobs: nodeBlobs{c.blobs, id}, Control: c.control, Network: memNetwork{c.net, id}, Datasets: noDatasets{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// replace puts r in the place of runner i, from runUntil's next round.
func (c *cluster) replace(i int, r *Runner) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runners[i] = r
}

// setPlan commits jp as epoch of job j, with a replan event as the scheduler records it.
func (c *cluster) setPlan(epoch uint64, jp scheduler.JobPlan) error {
	raw, err := json.Marshal(jp)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	if err := c.control.apply(consensus.PlanSetType, consensus.PlanSetRequest{JobID: "j", Epoch: epoch, Plan: raw, Time: now}); err != nil {
		return err
	}
	ev := consensus.NewEvent(consensus.EventReplan, epoch, jp.ResumeStep, "test")
	return c.control.apply(consensus.JobEventType, consensus.JobEventRequest{JobID: "j", Event: ev})
}

// submit commits job j with spec s running under plan jp at epoch 1.
func (c *cluster) submit(t *testing.T, s jobspec.Spec, jp scheduler.JobPlan) {
	now := time.Now().UTC()
	for _, step := range []struct {
		mt  consensus.MessageType
		msg any
	}{
		{consensus.JobSubmitType, consensus.JobSubmitRequest{ID: "j", Spec: s, Time: now}},
		{consensus.JobStatusType, consensus.JobStatusRequest{ID: "j", Status: consensus.JobPlanning, Time: now}},
	} {
		if err := c.control.apply(step.mt, step.msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.setPlan(1, jp); err != nil {
		t.Fatal(err)
	}
	if err := c.control.apply(consensus.JobStatusType, consensus.JobStatusRequest{ID: "j", Status: consensus.JobRunning, Time: now}); err != nil {
		t.Fatal(err)
	}
}

// runUntil hands the jobs to every runner at each change of the FSM, as the node's engine
// does, until the job is terminal.
func (c *cluster) runUntil(t *testing.T) consensus.Job {
	deadline := time.After(2 * time.Minute)
	for {
		changed := c.control.fsm.Changed()
		jobs, _ := c.control.fsm.Jobs()
		c.mu.Lock()
		runners := slices.Clone(c.runners)
		c.mu.Unlock()
		for _, r := range runners {
			r.Reconcile(jobs)
		}
		if j, _, err := c.control.fsm.Job("j"); err == nil && j.Status.Terminal() {
			return j
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the job did not finish in 2 minutes")
		}
	}
}

// TestRunnerTrainsAJobLikeASplitRun: two runners train a two-stage job to done through the
// control plane; the losses they report are bit for bit those of the same plan run by
// parallel.LocalRun in one process, every checkpoint is held by both nodes, and the job's
// event log ends with done.
func TestRunnerTrainsAJobLikeASplitRun(t *testing.T) {
	s := smallSpec(t)
	jp := twoStagePlan(s)
	c := newCluster(t)
	c.submit(t, s, jp)
	j := c.runUntil(t)
	if j.Status != consensus.JobDone || !j.Events[len(j.Events)-2].Is(consensus.EventDone) {
		t.Fatalf("job %s, events %+v", j.Status, j.Events)
	}
	want := localRunLosses(t, j, jp)
	if len(want) != 2 {
		t.Fatalf("the split run evaluated at %v, want steps 10 and 20", want)
	}
	got := map[int][2]float64{}
	for _, p := range j.Progress {
		if p.ValLoss != nil {
			got[p.Step] = [2]float64{p.Loss, *p.ValLoss}
		}
	}
	for step, w := range want {
		g, ok := got[step]
		if !ok || math.Float64bits(g[0]) != math.Float64bits(w[0]) || math.Float64bits(g[1]) != math.Float64bits(w[1]) {
			t.Errorf("step %d: runner reported loss, val %v (reported %v), split run %v", step, g, ok, w)
		}
	}
	checkCheckpoints(t, j, []int{5, 10, 15})
	checkStageTimes(t, j, "a", "b")
}

// checkStageTimes checks that every one of nodes reported its own phase times (not only
// the node that reports progress), each entry a mean over steps with compute in it.
func checkStageTimes(t *testing.T, j consensus.Job, nodes ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range j.StageTimes {
		if s.Epoch != 1 || s.Steps < 1 || !(s.Compute > 0) || s.Transfer < 0 || s.Bubble < 0 || s.Sync < 0 {
			t.Errorf("phase times entry %+v", s)
		}
		seen[s.Node] = true
	}
	for _, n := range nodes {
		if !seen[n] {
			t.Errorf("node %s reported no phase times; entries %+v", n, j.StageTimes)
		}
	}
}

// localRunLosses trains j's plan in one process and returns the training and validation
// losses of its evaluation steps.
func localRunLosses(t *testing.T, j consensus.Job, jp scheduler.JobPlan) map[int][2]float64 {
	data, err := model.LoadDataset(j.Spec.Data.Source, j.Spec.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	net := parallel.NewInMemory("a", "b")
	defer net.Close()
	run, err := parallel.NewLocalRun(jobConfig(j, 1, jp), EnginePlan(jp), data, net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][2]float64{}
	err = run.Run(t.Context(), 0, func(ev parallel.Event) {
		if ev.Kind == "step" && ev.HasVal {
			out[ev.Step] = [2]float64{ev.TrainLoss, ev.ValLoss}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkCheckpoints checks that the job has a complete checkpoint at each of steps whose
// every file is held by both nodes.
func checkCheckpoints(t *testing.T, j consensus.Job, steps []int) {
	t.Helper()
	L := scheduler.ModelConfig(j.Spec).NumLayers()
	byStep := map[int]consensus.CheckpointManifest{}
	for _, m := range j.Checkpoints {
		byStep[m.Step] = m
	}
	for _, step := range steps {
		m, ok := byStep[step]
		for _, node := range []string{"a", "b"} {
			held := func(id string) bool { return id == node }
			if !ok || !scheduler.CheckpointSurvives(CheckpointView(m), L, held) {
				t.Errorf("checkpoint of step %d (found %v) is not whole on %s alone: %+v", step, ok, node, m.Files)
			}
		}
	}
}

// TestRunnerResumesANewEpochFromItsCheckpoint: when a new epoch is committed the moment the
// step-10 checkpoint is whole, the runners stop their workers (recording the step they
// reached), restore the new epoch's workers from that checkpoint's files, and finish the
// job with the losses of an uninterrupted split run, bit for bit; the new epoch redoes at
// most the one step that was in flight.
func TestRunnerResumesANewEpochFromItsCheckpoint(t *testing.T) {
	s := smallSpec(t)
	jp := twoStagePlan(s)
	c := newCluster(t)
	var once sync.Once
	c.control.afterCheckpoint = func() {
		j, _, err := c.control.fsm.Job("j")
		if err != nil || !hasWholeCheckpoint(j, 10) {
			return
		}
		once.Do(func() {
			next := jp
			next.ResumeStep = 10
			if err := c.setPlan(2, next); err != nil {
				t.Errorf("commit epoch 2: %v", err)
			}
		})
	}
	c.submit(t, s, jp)
	j := c.runUntil(t)
	if j.Status != consensus.JobDone || j.Epoch() != 2 {
		t.Fatalf("job %s in epoch %d, want done in 2; events %+v", j.Status, j.Epoch(), j.Events)
	}
	want := localRunLosses(t, j, jp)[20]
	var got [2]float64
	for _, p := range j.Progress {
		if p.Step == 20 && p.ValLoss != nil {
			got = [2]float64{p.Loss, *p.ValLoss}
		}
	}
	if math.Float64bits(got[0]) != math.Float64bits(want[0]) || math.Float64bits(got[1]) != math.Float64bits(want[1]) {
		t.Errorf("step 20 after the resume: loss, val %v; uninterrupted %v", got, want)
	}
	// How far epoch 1 got before it noticed epoch 2 depends on scheduling (a loaded machine
	// lets it run on); what must hold is that the count is reported and possible: epoch 1
	// stopped somewhere between the checkpoint and the job's last step.
	redone, ok := scheduler.StepsRedone(JobView(j).Events)[2]
	if !ok || redone < 0 || redone > s.Train.Steps-10 {
		t.Errorf("epoch 2 redid %d steps (reported %v), want 0..%d; events %+v", redone, ok, s.Train.Steps-10, j.Events)
	}
	t.Logf("epoch 2 redid %d steps", redone)
}

// hasWholeCheckpoint reports whether j's checkpoint of step holds every layer.
func hasWholeCheckpoint(j consensus.Job, step int) bool {
	for _, m := range j.Checkpoints {
		if m.Step == step && scheduler.CheckpointSurvives(CheckpointView(m), scheduler.ModelConfig(j.Spec).NumLayers(), nil) {
			return true
		}
	}
	return false
}
