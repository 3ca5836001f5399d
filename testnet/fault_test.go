package testnet

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/node"
	"github.com/meshnode/meshnode/scheduler"
)

// faultCheckpointEvery is faultJob's checkpoint interval: the most steps a recovery may redo.
const faultCheckpointEvery = 10

// faultJob is a small job that every node of a testnet holds a stage of (even placement,
// one replica), checkpointing often; sync mode, so a resumed run follows the undisturbed
// one exactly.
func faultJob(t *testing.T, steps int) []byte {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("if err := n.Start(ctx); err != nil { return err } // testnet\n", 3000)), 0o644)
	spec := jobspec.DefaultSpec()
	spec.Name = "fault"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: corpus}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches = steps, 8, jobspec.Fixed(2)
	spec.Train.EvalEvery, spec.Train.Warmup = steps, 5
	spec.Parallel.Replicas, spec.Parallel.Sync = jobspec.Fixed(1), "sync"
	spec.Placement.Strategy = jobspec.StrategyEven
	spec.Checkpoint.Every = faultCheckpointEvery
	b, _ := spec.Document()
	return b
}

// oneRegion is a topology of n equal nodes in one region.
func oneRegion(n int) Topology { return slowRegion(n, 1) }

// slowRegion is a topology of n equal nodes in one region, each with the slowdown given:
// emulated slow devices keep a job running long enough for faults to land mid-job even
// when the machine is idle.
func slowRegion(n int, slowdown float64) Topology {
	var t Topology
	for i := range n {
		t.Nodes = append(t.Nodes, NodeSpec{Name: "n" + string(rune('0'+i)), Region: "lab", Slowdown: slowdown})
	}
	return t
}

type jobWatch struct {
	t   *testing.T
	tn  *Testnet
	id  string
	api *api.Client
}

func submitJob(t *testing.T, tn *Testnet, via *Node, spec []byte) *jobWatch {
	t.Helper()
	// faultJob's corpus lives under the temporary directory: it is the data root.
	id, err := via.Client().Submit(context.Background(), spec, os.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &jobWatch{t: t, tn: tn, id: id, api: via.Client()}
}

func (w *jobWatch) detail() consensus.JobDetail {
	d, _ := w.api.Job(context.Background(), w.id, false)
	return d
}

func (w *jobWatch) waitDone(timeout time.Duration) consensus.JobDetail {
	w.t.Helper()
	var d consensus.JobDetail
	if err := w.tn.WaitFor(func() bool { d = w.detail(); return d.Status.Terminal() }, timeout); err != nil {
		w.t.Fatalf("job %s did not finish: %v (status %s)", w.id, err, d.Status)
	}
	if d.Status != consensus.JobDone {
		w.t.Fatalf("job %s ended %s: %+v", w.id, d.Status, d.Events)
	}
	return d
}

func planOf(d consensus.JobDetail) scheduler.JobPlan {
	var jp scheduler.JobPlan
	if d.Plan != nil {
		json.Unmarshal(d.Plan.Plan, &jp)
	}
	return jp
}

func leaderOf(t *testing.T, n *Node) string {
	s, err := n.Client().Raft(context.Background())
	if err != nil {
		return ""
	}
	return s.Leader
}

// currentLeader waits until a live node names a live Raft leader and returns its ID: right
// after a restart, or on a loaded machine, the mesh can be between leaders for a moment.
func currentLeader(t *testing.T, tn *Testnet) string {
	t.Helper()
	var leader string
	err := tn.WaitFor(func() bool {
		for _, n := range tn.Nodes() {
			if !n.Alive() {
				continue
			}
			l := leaderOf(t, n)
			for _, m := range tn.Nodes() {
				if m.ID == l && m.Alive() {
					leader = l
					return true
				}
			}
		}
		return false
	}, 30*time.Second)
	if err != nil {
		t.Fatalf("no live Raft leader: %v", err)
	}
	return leader
}

// TestKillStageNodesMidJob SIGKILLs a node holding a stage mid-job — first a follower,
// then, on the restarted mesh, the Raft leader — and checks each time that the job
// finishes done from the last checkpoint with a validation loss within 5% of an
// undisturbed run of the same job; a new leader is elected within 5 s; and the killed
// follower, restarted from its data dir, rejoins with its Raft state and is used again.
func TestKillStageNodesMidJob(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	parallelScenario(t)
	tn := startTestnet(t, slowRegion(3, 4))
	const steps = 300
	// Four blocks: the even partition puts one on each of the four nodes, so whichever
	// node is killed holds a stage (with two, which two nodes held them depended on how
	// the planner ordered equal nodes, and the killed follower was sometimes idle).
	var js jobspec.Spec
	json.Unmarshal(faultJob(t, steps), &js)
	js.Model.Layers = 4
	spec, _ := json.Marshal(js)
	nodes := tn.Nodes()
	base := submitJob(t, tn, nodes[0], spec).waitDone(3 * time.Minute)
	baseVal := *base.Progress.ValLoss

	for _, killLeader := range []bool{false, true} {
		victim, observer := pickVictim(tn, currentLeader(t, tn), killLeader)
		w := submitJob(t, tn, observer, spec)
		survived := waitSurvivingCheckpoint(t, tn, w, victim)
		killed := time.Now()
		if err := tn.Kill(victim.Spec.Name); err != nil {
			t.Fatal(err)
		}
		if killLeader {
			err := tn.WaitFor(func() bool {
				l := leaderOf(t, observer)
				return l != "" && l != victim.ID
			}, 10*time.Second)
			if err != nil {
				t.Fatalf("no new leader: %v", err)
			}
			testutil.Within(t, "electing a new leader", time.Since(killed), 5*time.Second)
		}
		checkResumed(t, w.waitDone(3*time.Minute), victim, survived, killLeader, baseVal)

		if killLeader {
			break
		}
		// Restart the killed follower from its data dir: it rejoins, its Raft state knows
		// the jobs, and it holds a stage of the next job.
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		back, err := tn.Restart(ctx, victim.Spec.Name)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if back.ID != victim.ID {
			t.Fatalf("restarted node has id %s, was %s", back.ID, victim.ID)
		}
		waitRejoined(t, tn, back, w.id, 2)
		next := submitJob(t, tn, back, spec).waitDone(3 * time.Minute)
		used := false
		for _, id := range planOf(next).Nodes() {
			used = used || id == back.ID
		}
		if !used {
			t.Fatalf("the restarted node holds no stage of the next job: %+v", planOf(next).Replicas)
		}
	}
}

// pickVictim picks a live node to kill (the raft leader or a follower) and a live
// observer to submit through.
func pickVictim(tn *Testnet, leader string, killLeader bool) (victim, observer *Node) {
	for _, n := range tn.Nodes() {
		if (n.ID == leader) == killLeader && victim == nil && n.Alive() {
			victim = n
		}
	}
	for _, n := range tn.Nodes() {
		if n != victim && n.Alive() && observer == nil {
			observer = n
		}
	}
	return victim, observer
}

// waitSurvivingCheckpoint waits for a checkpoint of w's job that survives victim's loss and
// returns its step.
func waitSurvivingCheckpoint(t *testing.T, tn *Testnet, w *jobWatch, victim *Node) int {
	t.Helper()
	var survived int
	err := tn.WaitFor(func() bool {
		d := w.detail()
		for _, m := range d.Checkpoints {
			numLayers := d.Spec.Model.Layers + 2 // the blocks, the embedding and the head
			if scheduler.CheckpointSurvives(scheduler.CheckpointFromRecord(m), numLayers, func(id string) bool { return id != victim.ID }) {
				survived = m.Step
			}
		}
		if d.Status.Terminal() {
			for _, m := range d.Checkpoints[max(0, len(d.Checkpoints)-3):] {
				for _, f := range m.Files {
					t.Logf("step %d %s layers %v held by %s", m.Step, f.Kind, f.Layers, f.Node[len(f.Node)-6:])
				}
			}
			t.Fatalf("the job finished (%s) before a checkpoint survived without %s (%s)", d.Status, victim.Spec.Name, victim.ID[len(victim.ID)-6:])
		}
		return survived > 0
	}, 2*time.Minute)
	if err != nil {
		t.Fatalf("no checkpoint that survives %s: %v", victim.Spec.Name, err)
	}
	return survived
}

// checkResumed checks a job that lost victim mid-run: it resumed in a later epoch from at
// least the surviving checkpoint, without victim, redid at most checkpoint.every steps per
// epoch and ended within 5% of the undisturbed validation loss.
func checkResumed(t *testing.T, d api.JobDetail, victim *Node, survived int, killLeader bool, baseVal float64) {
	t.Helper()
	jp := planOf(d)
	if d.Plan.Epoch < 2 || jp.ResumeStep < survived {
		t.Fatalf("kill leader=%v: finished in epoch %d resuming from step %d; a checkpoint of step %d survived",
			killLeader, d.Plan.Epoch, jp.ResumeStep, survived)
	}
	for _, id := range jp.Nodes() {
		if id == victim.ID {
			t.Fatalf("the final plan uses the killed node")
		}
	}
	redone := scheduler.StepsRedone(scheduler.EventsFromRecord(d.Events))
	if len(redone) == 0 {
		t.Fatalf("kill leader=%v: no epoch reports the steps it redid; events %+v", killLeader, d.Events)
	}
	for epoch, n := range redone {
		if n > faultCheckpointEvery {
			t.Errorf("kill leader=%v: epoch %d redid %d steps, want ≤ checkpoint.every = %d", killLeader, epoch, n, faultCheckpointEvery)
		}
	}
	val := *d.Progress.ValLoss
	if math.Abs(val-baseVal)/baseVal > 0.05 {
		t.Errorf("kill leader=%v: final validation loss %.4f, undisturbed %.4f: more than 5%% apart", killLeader, val, baseVal)
	}
	t.Logf("kill leader=%v: resumed from step %d in epoch %d (steps redone per epoch %v), val %.4f (undisturbed %.4f)",
		killLeader, jp.ResumeStep, d.Plan.Epoch, redone, val, baseVal)

}

// plannable reports whether every other live node sees n alive with a profile the leader
// can plan with (measured speed and a data-plane address): on a loaded machine a
// restarted node can see its peers before its own first profile has reached them, and a
// job submitted then is planned without it.
func plannable(tn *Testnet, n *Node) bool {
	for _, m := range tn.Nodes() {
		if m == n || !m.Alive() {
			continue
		}
		ps, err := m.Client().Peers(context.Background())
		if err != nil {
			return false
		}
		seen := false
		for _, p := range ps {
			if p.ID == n.ID {
				seen = p.State == "alive" && p.Profile != nil && p.Profile.DataAddr != "" && p.Profile.TrainGFLOPS > 0
			}
		}
		if !seen {
			return false
		}
	}
	return true
}

func alivePeers(n *Node) []string {
	ps, err := n.Client().Peers(context.Background())
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range ps {
		if p.State == "alive" {
			out = append(out, p.ID)
		}
	}
	return out
}

// TestNodeJoinsMidJob starts a fourth, faster node while a job runs on three slow ones; the
// leader rebalances onto it in a later epoch and the job finishes.
func TestNodeJoinsMidJob(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	// Each node stands for a machine of its own (join --host-label): on one host the
	// balancer prices nodes as sharing its cores, and a joined node would add none.
	topo := slowRegion(3, 6)
	for i := range topo.Nodes {
		topo.Nodes[i].Env = map[string]string{"MESHNODE_HOST_LABEL": topo.Nodes[i].Name}
	}
	tn := startTestnet(t, topo)
	var spec jobspec.Spec
	json.Unmarshal(faultJob(t, 4000), &spec)
	spec.Parallel.Replicas, spec.Placement.Strategy = jobspec.Auto(), jobspec.StrategyAuto
	b, _ := spec.Document()
	w := submitJob(t, tn, tn.Nodes()[0], b)
	if err := tn.WaitFor(func() bool { d := w.detail(); return len(d.Checkpoints) > 0 }, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	fast, err := tn.AddNode(ctx, NodeSpec{Name: "fast", Region: "lab", Slowdown: 1, Env: map[string]string{"MESHNODE_HOST_LABEL": "fast"}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	d := w.waitDone(5 * time.Minute)
	used := false
	for _, p := range []consensus.PlanEpoch{*d.Plan} {
		var jp scheduler.JobPlan
		json.Unmarshal(p.Plan, &jp)
		for _, id := range jp.Nodes() {
			used = used || id == fast.ID
		}
	}
	if !used || d.Plan.Epoch < 2 {
		t.Fatalf("the joined node is not in the final plan (epoch %d); events %+v", d.Plan.Epoch, d.Events)
	}
}

// TestCheckpointCrashAndCorruptCopies: a node dies in the middle of writing its step-20
// checkpoint (the fault-injection hook leaves half a file in the atomic write's temporary
// file), and a surviving node's copies of the checkpoint files are corrupted on disk
// before. The job resumes from the previous checkpoint (step 10), the survivor refuses its
// corrupt copies and fetches them again from another holder, and the job finishes done;
// the crashed node, restarted from its data dir, rejoins.
func TestCheckpointCrashAndCorruptCopies(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	parallelScenario(t)
	topo := slowRegion(3, 4)
	topo.Nodes[2].Env = map[string]string{node.CrashInCheckpointEnv: "20"}
	tn := startTestnet(t, topo)
	nodes := tn.Nodes()
	survivor, crasher := nodes[0], nodes[2]
	w := submitJob(t, tn, nodes[1], faultJob(t, 300))
	// Until the crash, corrupt the survivor's copy of every checkpoint file that another
	// live node also holds (so an intact copy exists), as soon as it appears.
	corrupted := map[string]bool{}
	corrupt := func() {
		for _, m := range w.detail().Checkpoints {
			for _, f := range m.Files {
				intactElsewhere := false
				for _, g := range m.Files {
					intactElsewhere = intactElsewhere || (g.Hash == f.Hash && g.Node != survivor.ID && g.Node != crasher.ID)
				}
				path := filepath.Join(survivor.DataDir, node.BlobDir, f.Hash)
				b, err := os.ReadFile(path)
				if corrupted[f.Hash] || !intactElsewhere || err != nil || len(b) == 0 {
					continue
				}
				b[len(b)/2] ^= 0x5a
				if os.WriteFile(path, b, 0o600) == nil {
					corrupted[f.Hash] = true
				}
			}
		}
	}
	if err := tn.WaitFor(func() bool { corrupt(); return !crasher.Alive() }, 3*time.Minute); err != nil {
		t.Fatalf("the node set to crash at step 20 still runs: %v", err)
	}
	if len(corrupted) == 0 {
		t.Fatal("the survivor held no checkpoint file to corrupt before the crash")
	}
	d := w.waitDone(3 * time.Minute)
	jp := planOf(d)
	if d.Plan.Epoch < 2 || jp.ResumeStep != 10 {
		t.Fatalf("finished in epoch %d resuming from step %d, want a new epoch from step 10 (step 20 was never complete)", d.Plan.Epoch, jp.ResumeStep)
	}
	for epoch, n := range scheduler.StepsRedone(scheduler.EventsFromRecord(d.Events)) {
		if n > faultCheckpointEvery {
			t.Errorf("epoch %d redid %d steps, want ≤ %d", epoch, n, faultCheckpointEvery)
		}
	}
	if log := tailFile(survivor.LogPath(), 1<<20); !strings.Contains(log, "checkpoint file corrupt on this node") {
		t.Errorf("the survivor's log does not show a corrupt copy refused (corrupted %d files)", len(corrupted))
	}
	tmps, _ := filepath.Glob(filepath.Join(crasher.DataDir, "checkpoints", d.ID, "step-20", ".*.tmp*"))
	if len(tmps) == 0 {
		t.Errorf("no half-written temporary file in the crashed node's step-20 directory")
	}
	t.Logf("crash at step 20: resumed from step %d in epoch %d (%d corrupted copies refetched), val %.4f",
		jp.ResumeStep, d.Plan.Epoch, len(corrupted), *d.Progress.ValLoss)

	crasher.Spec.Env = nil
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	back, err := tn.Restart(ctx, crasher.Spec.Name)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	waitRejoined(t, tn, back, w.id, 2)
}

// waitRejoined waits until a restarted node sees the job done in its Raft state and the
// given number of live peers.
func waitRejoined(t *testing.T, tn *Testnet, back *Node, jobID string, peers int) {
	t.Helper()
	err := tn.WaitFor(func() bool {
		j, err := back.Client().Job(context.Background(), jobID, false)
		return err == nil && j.Status == consensus.JobDone && len(alivePeers(back)) == peers && plannable(tn, back)
	}, 60*time.Second)
	if err != nil {
		t.Fatalf("restarted node %s does not see job %s done and %d live peers: %v", back.Spec.Name, jobID, peers, err)
	}
}

// TestSubmitterKilledRightAfterSubmit (issue 26, part 3): the node a job is submitted
// through packs the local corpus into the dataset blob; it is SIGKILLed as soon as the
// submit answers. The submit answered only once another member held the dataset, so the
// surviving nodes fetch it from that member, the leader plans the job on them, and it
// finishes done. Without the replication at submit the dataset lives only on the dead
// node and every epoch fails fetching it.
func TestSubmitterKilledRightAfterSubmit(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	parallelScenario(t)
	tn := startTestnet(t, slowRegion(3, 2))
	nodes := tn.Nodes()
	submitter, observer := nodes[0], nodes[1]
	w := submitJob(t, tn, submitter, faultJob(t, 60))
	if err := tn.Kill(submitter.Spec.Name); err != nil {
		t.Fatal(err)
	}
	w.api = observer.Client()
	d := w.waitDone(4 * time.Minute)
	for _, id := range planOf(d).Nodes() {
		if id == submitter.ID {
			t.Fatalf("the final plan still names the killed submitter: %+v", planOf(d).Replicas)
		}
	}
}
