package testnet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
)

// replicaJob is a DiLoCo job of three replicas (on three nodes: one node each), with an outer step
// every 5 steps, checkpoints every 100 steps and one evaluation at the end.
func replicaJob(t *testing.T, steps int) []byte {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("if err := n.Start(ctx); err != nil { return err } // testnet\n", 3000)), 0o644)
	spec := jobspec.DefaultSpec()
	spec.Name = "replicas"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: corpus}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches = steps, 8, jobspec.Fixed(2)
	spec.Train.EvalEvery, spec.Train.Warmup = steps, 5
	spec.Parallel.Replicas, spec.Parallel.Stages, spec.Parallel.Sync = jobspec.Fixed(3), jobspec.Auto(), jobspec.SyncDiLoCo
	spec.Parallel.InnerSteps = 5
	spec.Placement.MinNodes = 3
	spec.Checkpoint.Every = 100
	b, _ := json.Marshal(spec)
	return b
}

// TestKillOneDiLoCoReplicaOfThree: kill -9 of the node of one DiLoCo replica of three (not
// the Raft leader, not the replica that reports progress) mid-job. The survivors keep
// training: the progress they report never stalls more than 5 s around the kill (the
// largest gap between two samples whose step grew), never goes back, the job gets no
// replan (no checkpoint restart, no worker of a survivor stopped or failed) and finishes in
// an epoch that continues the first in place without the killed node.
func TestKillOneDiLoCoReplicaOfThree(t *testing.T) {
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	killReplica(t, false)
}

// TestKillTheReportingDiLoCoReplica is TestKillOneDiLoCoReplicaOfThree with the node of
// replica 0 killed, the one that reports progress and evaluates: the first replica of the
// continued plan takes both over, from the step it is at. The leader plans with itself
// first, so this node is the Raft leader too: the survivors elect another, whose
// scheduler continues the job.
func TestKillTheReportingDiLoCoReplica(t *testing.T) {
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	killReplica(t, true)
}

// killReplica runs the scenario: the victim is the node of replica 0 when reporterDies,
// else another that is not the Raft leader.
func killReplica(t *testing.T, reporterDies bool) {
	tn := startTestnet(t, slowRegion(3, 4))
	leader := currentLeader(t, tn)
	nodes := tn.Nodes()
	w := submitJob(t, tn, nodes[0], replicaJob(t, 2400))

	const killAt = 200
	// Wait until the job has trained a while, then pick a victim that neither leads Raft
	// nor holds replica 0 (the progress reporter), and kill it.
	var d consensus.JobDetail
	if err := tn.WaitFor(func() bool {
		d = w.detail()
		return d.Status == consensus.JobRunning && d.Progress.Step >= killAt
	}, 3*time.Minute); err != nil {
		t.Fatalf("the job did not reach step %d: %v (status %s)", killAt, err, d.Status)
	}
	jp := planOf(d)
	if len(jp.Replicas) != 3 {
		t.Fatalf("plan %+v, want three replicas", jp.Replicas)
	}
	var victim *Node
	for _, n := range nodes {
		reporter := n.ID == jp.Replicas[0][0].Node
		if reporter == reporterDies && (reporterDies || n.ID != leader) && victim == nil {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("no victim (reporter %v) in %+v", reporterDies, jp.Replicas)
	}
	killed := time.Now()
	if err := tn.Kill(victim.Spec.Name); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n != victim {
			w.api = n.Client() // follow the job through a survivor
			break
		}
	}
	d = w.waitDone(4 * time.Minute)

	final := planOf(d)
	if !final.Continues || final.Has(victim.ID) || len(final.Replicas) != 2 {
		t.Fatalf("final epoch %d: continues=%v, replicas %+v; want the two survivors continuing in place", d.Plan.Epoch, final.Continues, final.Replicas)
	}
	for _, ev := range d.Events {
		if ev.Is(consensus.EventReplan) || ev.Is(consensus.EventWorkerStopped) || ev.Is(consensus.EventWorkerFailed) {
			t.Errorf("event %s at step %d: %s", ev.Kind, ev.Step, ev.Message)
		}
	}
	for _, p := range d.Progress.Samples {
		t.Logf("sample %s epoch %d step %d", p.Time.Format("15:04:05.000"), p.Epoch, p.Step)
	}
	t.Logf("killed at %s", killed.Format("15:04:05.000"))
	var stall time.Duration
	var at int
	samples := d.Progress.Samples
	for i := 1; i < len(samples); i++ {
		prev, p := samples[i-1], samples[i]
		if p.Step < prev.Step {
			t.Errorf("progress went back from step %d to %d", prev.Step, p.Step)
		}
		if p.Time.Before(killed.Add(-5*time.Second)) || p.Step <= prev.Step {
			continue
		}
		if gap := p.Time.Sub(prev.Time); gap > stall {
			stall, at = gap, p.Step
		}
	}
	t.Logf("killed %s at step ≥ %d; the longest wait for a step since: %.1f s (before step %d); %d progress samples",
		victim.Spec.Name, killAt, stall.Seconds(), at, len(samples))
	testutil.Within(t, "the survivors' longest stall around the kill", stall, 5*time.Second)
}
