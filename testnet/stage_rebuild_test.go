package testnet

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/records"
)

// stageJob is a DiLoCo job of two replicas of two pipeline stages (four nodes), with an
// outer step every 5 steps, checkpoints every 500 steps and one evaluation at the end.
// The first checkpoint comes after the kill (past step 200): the scheduler moves a job
// only from a checkpoint, so no move for load or growth can take the 2 × 2 plan the kill
// is aimed at before it lands (with checkpoints every 100, a loaded CI host twice saw a
// straggler move to one node with offload before step 200), and the rebuild copies live
// state, needing none.
func stageJob(t *testing.T, steps int) []byte {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("if err := n.Start(ctx); err != nil { return err } // testnet\n", 3000)), 0o644)
	spec := jobspec.DefaultSpec()
	spec.Name = "stages"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: corpus}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches = steps, 8, jobspec.Fixed(2)
	spec.Train.EvalEvery, spec.Train.Warmup = steps, 5
	spec.Parallel.Replicas, spec.Parallel.Stages, spec.Parallel.Sync = jobspec.Fixed(2), jobspec.Fixed(2), jobspec.SyncDiLoCo
	spec.Parallel.InnerSteps = 5
	spec.Placement.MinNodes = 4
	spec.Checkpoint.Every = 500
	b, _ := spec.Document()
	return b
}

// TestKilledStageIsRebuiltFromALivePeer: kill -9 of the node of one pipeline stage of the
// second replica of a 2 × 2 DiLoCo job (not the Raft leader) mid-job, then its restart.
// The leader continues the job in place without that replica (its other stage's worker
// stops), then rebuilds it in place once the node is back: both of its nodes copy their
// layers from the first replica's stages at one outer-step boundary (state_copied, no
// checkpoint restored), both are admitted (rejoined), and the job finishes with the four;
// the first replica never stalls more than 5 s, nothing replans, and the validation loss
// goes down.
//
// The recovery is judged up to the scheduler's first straggler or recalibration move after
// the rebuild (a rebalance from a checkpoint, when the loaded machine makes the rebuilt
// epoch slower than predicted): that move is the planner's answer to load, not part of the
// recovery, and is only logged.
func TestKilledStageIsRebuiltFromALivePeer(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	rebuildStage(t, false)
}

// TestKilledStageIsRebuiltOnASpare is TestKilledStageIsRebuiltFromALivePeer with a fifth
// node that the plan leaves idle and the killed node never restarted: the leader rebuilds
// the lost stage's replica with the idle node in the dead one's place.
func TestKilledStageIsRebuiltOnASpare(t *testing.T) {
	requireScenarios(t)
	parallelScenario(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	rebuildStage(t, true)
}

// rebuildStage runs the scenarios: with spare, five nodes and no restart.
func rebuildStage(t *testing.T, spare bool) {
	n := 4
	if spare {
		n = 5
	}
	topo := slowRegion(n, 4)
	for i := range topo.Nodes {
		// Each node stands for a machine of its own (priced as sharing one host's cores, a
		// plan of four nodes is no faster than one of two), and none holds the whole model:
		// the fixed two stages are then the balancer's plan (with more memory it keeps
		// one-stage replicas, faster for this model).
		topo.Nodes[i].Env = map[string]string{"MESHNODE_HOST_LABEL": topo.Nodes[i].Name}
		topo.Nodes[i].Memory = "600KiB"
	}
	tn := startTestnet(t, topo)
	leader := currentLeader(t, tn)
	nodes := tn.Nodes()
	w := submitJob(t, tn, nodes[0], stageJob(t, 2400))
	const killAt = 200
	var d consensus.JobDetail
	if err := tn.WaitFor(func() bool {
		d = w.detail()
		return d.Status == consensus.JobRunning && d.Progress.Step >= killAt
	}, 3*time.Minute); err != nil {
		t.Fatalf("the job did not reach step %d: %v (status %s)", killAt, err, d.Status)
	}
	jp := planOf(d)
	if len(jp.Replicas) != 2 || len(jp.Replicas[1]) != 2 {
		t.Fatalf("plan %+v (%s), want two replicas of two stages", jp.Replicas, jp.Reason)
	}
	// The victim holds the second replica's last stage, or its first when the last is the
	// Raft leader's; other is the replica's stage that survives.
	victimID, otherID := jp.Replicas[1][1].Node, jp.Replicas[1][0].Node
	if victimID == leader {
		victimID, otherID = otherID, victimID
	}
	var victim, other *Node
	for _, n := range nodes {
		switch n.ID {
		case victimID:
			victim = n
		case otherID:
			other = n
		}
	}
	if victim == nil || other == nil {
		t.Fatalf("nodes %s and %s of %+v are not the testnet's", victimID, otherID, jp.Replicas)
	}
	killed := time.Now()
	if err := tn.Kill(victim.Spec.Name); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != victim && n != other {
			w.api = n.Client() // follow the job through the first replica
			break
		}
	}
	var restarted time.Time
	stand := victim // the node in the dead one's place at the end
	if spare {
		for _, n := range nodes {
			if !jp.Has(n.ID) {
				stand = n
			}
		}
		if stand == victim {
			t.Fatalf("plan %+v uses every node: no spare", jp.Replicas)
		}
	} else {
		restarted = restartVictim(t, tn, w, victim)
	}
	d = w.waitDone(5 * time.Minute)
	for _, ev := range d.Events {
		if !ev.Is(consensus.EventCheckpoint) {
			t.Logf("event %s %s epoch %d step %d by %.12s: %s", ev.Time.Format("15:04:05.000"), ev.Kind, ev.Epoch, ev.Step, ev.By, ev.Message)
		}
	}
	final := planOf(d)
	moved, wasMoved := loadMove(d.Events)
	// After a move for load the last epoch starts from that move's checkpoint, not in place.
	inPlace := final.Continues || wasMoved
	if !inPlace || len(final.Replicas) != 2 || !final.Has(stand.ID) || !final.Has(other.ID) {
		t.Fatalf("final epoch %d: continues=%v, replicas %+v; want both replicas, the rebuilt one in place", d.Plan.Epoch, final.Continues, final.Replicas)
	}
	if wasMoved {
		t.Logf("the scheduler moved the job for load at %s, after the rebuild: judged up to then", moved.Format("15:04:05.000"))
	}
	// The surviving stage of the broken replica stops its worker of the epoch the kill hit:
	// the first, or an in-place recalibration of it (a first plan is recalibrated a few
	// seconds in, and a kill may land on either side of that), the epochs before the one
	// that goes on without the dead node.
	lost := uint64(2)
	for _, ev := range d.Events {
		if ev.Is(consensus.EventPlan) && strings.Contains(ev.Message, "is dead") {
			lost = ev.Epoch
			break
		}
	}
	// A move before the kill (growth onto the spare, a straggler move: CI saw growth take
	// the spare 6 s in, the kill landing 0.2 s later) stops every worker then; that is the
	// scheduler's business, not the kill's.
	copied, rejoined := map[string]int{}, map[string]bool{}
	for _, ev := range d.Events {
		stopped := ev.Is(consensus.EventWorkerStopped) || ev.Is(consensus.EventWorkerFailed)
		switch {
		case ev.Is(consensus.EventReplan),
			stopped && (ev.By != other.ID || ev.Epoch >= lost) && ev.Time.Before(moved) && !ev.Time.Before(killed):
			t.Errorf("event %s at step %d by %.12s: %s", ev.Kind, ev.Step, ev.By, ev.Message)
		case ev.Is(consensus.EventStateCopied):
			copied[ev.By] = ev.Step
		case ev.Is(consensus.EventRejoined):
			rejoined[ev.By] = true
		}
	}
	if len(copied) != 2 || copied[stand.ID] != copied[other.ID] || copied[stand.ID]%5 != 0 || !rejoined[stand.ID] || !rejoined[other.ID] {
		t.Fatalf("copies %v, admissions %v: want both stages of the rebuilt replica copied at one outer step and admitted", copied, rejoined)
	}
	t.Logf("killed %s at %s, restarted at %s, %s in its place; both stages copied step %d", victim.Spec.Name, killed.Format("15:04:05.000"),
		restarted.Format("15:04:05.000"), stand.Spec.Name, copied[stand.ID])
	// A move the scheduler committed before the kill resumes from its checkpoint, and the
	// samples can show that only after the kill (ci37: growth onto the spare 40 ms before
	// it, progress 288 → 201): the first regression to at or past such a move's resume
	// step is the move's, not the kill's.
	resumed := -1
	for _, ev := range d.Events {
		if ev.Is(consensus.EventRebalance) && ev.Time.Before(killed) {
			resumed = ev.Step
		}
	}
	var stall time.Duration
	samples := d.Progress.Samples
	for i := 1; i < len(samples); i++ {
		prev, p := samples[i-1], samples[i]
		if !p.Time.Before(moved) {
			break // the load move resumes from a checkpoint: steps go back, and it waits
		}
		if p.Step < prev.Step && !p.Time.Before(killed) { // a move before the kill is not the kill's
			if resumed >= 0 && p.Step >= resumed {
				t.Logf("progress went back from step %d to %d: the move before the kill resumed from step %d", prev.Step, p.Step, resumed)
				resumed = -1
				continue
			}
			t.Errorf("progress went back from step %d to %d", prev.Step, p.Step)
		}
		if p.Time.After(killed.Add(-5*time.Second)) && p.Step > prev.Step {
			stall = max(stall, p.Time.Sub(prev.Time))
		}
	}
	t.Logf("the first replica's longest wait for a step since the kill: %.1f s", stall.Seconds())
	testutil.Within(t, "the first replica's longest stall around the kill", stall, 5*time.Second)
	var first, last *float64
	for _, p := range samples {
		if p.ValLoss != nil {
			if first == nil {
				first = p.ValLoss
			}
			last = p.ValLoss
		}
	}
	if first == nil || last == nil || math.IsNaN(*last) || *last >= *first {
		t.Fatalf("validation loss %v → %v: want it down", first, last)
	}
	t.Logf("validation loss %.4f → %.4f", *first, *last)
}

// loadMove is the time of the first rebalance for load (a straggler or a recalibration:
// the scheduler moves the job from a checkpoint because an epoch ran slower than
// predicted) after the lost replica was rebuilt; without one, the far future and false. On
// the shared 2-vCPU machine the rebuilt epoch is sometimes 1.5× slower than predicted;
// what follows is the planner's answer to that load, which these scenarios do not judge.
func loadMove(events []records.Event) (time.Time, bool) {
	rebuilt := false
	for _, ev := range events {
		switch {
		case ev.Is(consensus.EventRejoined):
			rebuilt = true
		case rebuilt && ev.Is(consensus.EventRebalance) &&
			(strings.HasPrefix(ev.Message, "straggler:") || strings.HasPrefix(ev.Message, "recalibrated")):
			return ev.Time, true
		}
	}
	return time.Unix(1<<40, 0), false
}
