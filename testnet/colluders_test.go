package testnet

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/node"
)

// TestColludersAreConvictedAndLeftOut: two members of four lie together, end to end on
// real nodes. Each of the two colluders trains on random tokens in place of its share of
// the data (node.NoiseDataEnv) and signs what it computes, as a member that trains on
// something else would; the honest members' held-out scores drop their outer updates and
// name them, but two is only half of the plan, which on its own excludes nobody (and the
// colluders name the honest members back). What breaks the tie is evidence: each honest
// worker ships the signed contributions of the sync that dropped a colluder to the Raft
// leader, which re-judges them itself and commits a verdict. The first conviction replans
// the job without that colluder; the second colluder's evidence, shipped
// EvidenceInterval later by the same reporter, is judged under the plan of the epoch it is
// of, though the job has left it, and convicts it too. No honest member is ever
// convicted, the final plan holds honest members only, and the job finishes with its
// validation loss below the untrained model's. Before Offenders counted each accusation
// against the plan it was made in, the two-and-two accusations added up under the plan of
// three and every member became an offender: the job failed with no node left. Before the
// leader judged evidence under its own epoch's plan, the second evidence was refused once
// the replan left out its reporter, and the balancer once planned the second colluder
// alone to the end.
//
// This is the unaudited path (parallel.audit 0), for the jobs audits do not cover;
// TestAuditedColludersAreConvictedAndLeftOut runs the same colluders under the default.
func TestColludersAreConvictedAndLeftOut(t *testing.T) {
	requireScenarios(t)
	colluders(t, jobspec.Pinned(0))
}

// TestAuditedColludersAreConvictedAndLeftOut is TestColludersAreConvictedAndLeftOut under
// the default parallel.audit (auto: one member per outer step recomputed, and every
// contribution the held-out score drops). The honest members' scores drop both colluders
// at the first outer step and their recomputation proves it, so they name and ban them
// at once, and the leader convicts both on that evidence (about a minute here, as the
// unaudited path takes). Before the score's drops were audited, only the draw was
// recomputed: it drew an honest member at the first outer step, the colluders,
// recomputing on their noise, took it for a replayer and left it out of their gathers,
// the honest pair fell below quorum at the next one, and the job restarted from step 0
// into the same draw, convicting nobody in four minutes.
func TestAuditedColludersAreConvictedAndLeftOut(t *testing.T) {
	requireScenarios(t)
	colluders(t, jobspec.AutoValue())
}

// colluders runs the colluders scenario with parallel.audit set to audit.
func colluders(t *testing.T, audit jobspec.AutoFloat) {
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	// Serial, not parallelScenario: its honest members score every outer step of 4000 on
	// held-out data, enough load that CI's four parallel scenarios' testnets missed their
	// readiness deadline beside it ("n0 sees no data-plane link of n4 to n1").
	topo := slowRegion(4, 4) // slow enough that the job outlasts the second evidence (EvidenceInterval after the first)
	for _, i := range []int{2, 3} {
		topo.Nodes[i].Env = map[string]string{node.NoiseDataEnv: "1"}
	}
	tn := startTestnet(t, topo)
	nodes := tn.Nodes()
	colluders := []string{nodes[2].ID, nodes[3].ID}
	w := submitJob(t, tn, nodes[0], colluderJob(t, audit))

	var d consensus.JobDetail
	sawFour := false // the job first ran with the colluders: four replicas
	if err := tn.WaitFor(func() bool {
		d = w.detail()
		jp := planOf(d)
		sawFour = sawFour || len(jp.Replicas) == 4
		return d.Status.Terminal() || d.Status == consensus.JobRunning && len(jp.Replicas) > 0 && !jp.Has(colluders[0]) && !jp.Has(colluders[1])
	}, 4*time.Minute); err != nil {
		t.Fatalf("the colluders were not left out of a plan: %v (status %s, verdicts %+v)", err, d.Status, d.Verdicts)
	}
	d = w.waitDone(4 * time.Minute)
	for _, ev := range d.Events {
		if !ev.Is(consensus.EventCheckpoint) {
			t.Logf("event %s %s epoch %d step %d by %.12s: %s", ev.Time.Format("15:04:05.000"), ev.Kind, ev.Epoch, ev.Step, ev.By, ev.Message)
		}
	}
	convicted := map[string]bool{}
	for _, v := range d.Verdicts {
		t.Logf("verdict on %.12s (accuser %.12s, by %.12s, judged in epoch %d): convicted %v, %s", v.Member, v.Accuser, v.By, v.Epoch, v.Convicted, v.Reason)
		if v.Convicted {
			if !slices.Contains(colluders, v.Member) {
				t.Errorf("an honest member %s was convicted: %+v", v.Member, v)
			}
			convicted[v.Member] = true
		}
	}
	for _, c := range colluders {
		// Half of the plan named each colluder: only a verdict breaks the tie. The second
		// is judged after the first replan, under the plan of the epoch its evidence is of.
		if !convicted[c] {
			t.Errorf("colluder %s was not convicted (verdicts %+v)", c, d.Verdicts)
		}
	}
	final := planOf(d)
	if final.Has(colluders[0]) || final.Has(colluders[1]) || !final.Has(nodes[0].ID) && !final.Has(nodes[1].ID) {
		t.Errorf("final plan %+v: want honest members only", final.Replicas)
	}
	if !sawFour {
		t.Error("no plan of four replicas was seen: the test proves nothing unless the colluders trained first")
	}
	init, last := d.Progress.InitialValLoss, d.Progress.ValLoss
	if init == nil || last == nil || !(*last < *init) {
		t.Errorf("validation loss %v → %v: want the honest members to have trained", init, last)
	}
}

// colluderJob is a DiLoCo job of four one-stage replicas on a small model, an outer step
// every 3 steps, a checkpoint every 30 steps (the plan without the colluders resumes from
// one) and one evaluation at the end; 4000 steps, so that it still runs when the evidence
// against the second colluder (shipped EvidenceInterval after the first by the same
// reporter) is judged.
func colluderJob(t *testing.T, audit jobspec.AutoFloat) []byte {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "corpus.txt")
	os.WriteFile(corpus, []byte(strings.Repeat("for _, m := range members { if m.lied() { convict(m) } } // mesh\n", 3000)), 0o644)
	spec := jobspec.DefaultSpec()
	spec.Name = "colluders"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: corpus}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches = 4000, 8, jobspec.Fixed(1)
	spec.Train.EvalEvery, spec.Train.Warmup = 4000, 5
	spec.Parallel.Replicas, spec.Parallel.Stages, spec.Parallel.Sync = jobspec.Fixed(4), jobspec.Fixed(1), jobspec.SyncDiLoCo
	spec.Parallel.InnerSteps = 3
	spec.Placement.MinNodes = 2
	spec.Checkpoint.Every = 30
	spec.Parallel.Audit = audit
	b, _ := spec.Document()
	return b
}
