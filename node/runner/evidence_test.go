package runner

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// TestJudgeEvidenceRefusesWhatItCannotCheck: the leader's judge refuses, as errors (not
// verdicts), evidence of a job without a plan, evidence that does not decode, and a job
// whose data is not a dataset blob (its data could not be the reporter's); each names
// what is missing.
func TestJudgeEvidenceRefusesWhatItCannotCheck(t *testing.T) {
	c := newCluster(t)
	r := c.runners[0]
	s := smallSpec(t)
	raw, err := json.Marshal(twoStagePlan(s))
	if err != nil {
		t.Fatal(err)
	}
	planned := consensus.Job{ID: "j", Spec: s, Plans: []consensus.PlanEpoch{{Epoch: 1, Plan: raw}}}
	ev := (&parallel.Evidence{Job: 1, Epoch: 1, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{nil, nil}}).Marshal()
	old := (&parallel.Evidence{Job: 1, Epoch: 2, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{nil, nil}}).Marshal()
	for name, c := range map[string]struct {
		job      consensus.Job
		evidence []byte
		want     string
	}{
		"no plan":          {consensus.Job{ID: "j", Spec: s}, ev, "no plan"},
		"malformed":        {planned, []byte("MNEV\x01junk"), "offender evidence"},
		"no data blob":     {planned, ev, "dataset blob"},
		"unrecorded epoch": {planned, old, "no plan of the evidence's epoch 2"},
	} {
		convicted, _, err := r.JudgeEvidence(context.Background(), c.job, "a", "b", c.evidence)
		if err == nil || convicted || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: convicted %v, %v; want an error naming %q", name, convicted, err, c.want)
		}
		// Only evidence that does not decode disconnects its reporter (the leader's
		// consensus.ErrMalformedEvidence); what the leader cannot check is its own limit.
		if malformed := errors.Is(err, consensus.ErrMalformedEvidence); malformed != (name == "malformed") {
			t.Errorf("%s: ErrMalformedEvidence %v, want %v", name, malformed, name == "malformed")
		}
	}
}

// TestEvidenceIsHeldToItsEpochsPlan: evidence is judged under the plan of the epoch its
// collective ran in, which the job may have left (a first conviction replans it; the
// evidence against a second colluder arrives later): a reporter or an accused that was
// not a node of that epoch's plan is a false accusation, whatever the current plan.
func TestEvidenceIsHeldToItsEpochsPlan(t *testing.T) {
	r := newCluster(t).runners[0]
	s := smallSpec(t)
	raw, err := json.Marshal(twoStagePlan(s))
	if err != nil {
		t.Fatal(err)
	}
	L := scheduler.ModelConfig(s).NumLayers()
	later, err := json.Marshal(scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "c", First: 0, Last: L}}}, Batches: []int{s.Train.Batch}, MicroBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	j := consensus.Job{ID: "j", Spec: s, Plans: []consensus.PlanEpoch{{Epoch: 1, Plan: raw}, {Epoch: 2, Plan: later}}}
	ev := (&parallel.Evidence{Job: 1, Epoch: 2, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{nil, nil}}).Marshal()
	convicted, why, err := r.JudgeEvidence(context.Background(), j, "a", "b", ev)
	if err != nil || convicted || !strings.Contains(why, "does not hold both") {
		t.Errorf("evidence of epoch 2 between nodes of epoch 1's plan: convicted %v (%s), %v; want a false accusation", convicted, why, err)
	}
	ev = (&parallel.Evidence{Job: 1, Epoch: 1, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{nil, nil}}).Marshal()
	if _, _, err := r.JudgeEvidence(context.Background(), j, "a", "b", ev); err == nil || !strings.Contains(err.Error(), "dataset blob") {
		t.Errorf("evidence of epoch 1 under a later plan: %v; want it judged under epoch 1's plan (here: refused for the data, not the plan)", err)
	}
}

// blobDataset serves one dataset as every dataset blob.
type blobDataset struct {
	noDatasets
	data *model.Dataset
}

func (b blobDataset) LoadDataset(context.Context, string, []int) (*model.Dataset, error) {
	return b.data, nil
}

// keyedPeer is an in-memory peer that signs with its node key.
type keyedPeer struct {
	parallel.Transport
	key ed25519.PrivateKey
}

func (p keyedPeer) SigningKey() ed25519.PrivateKey { return p.key }

// TestLeaderConvictsColludersFromShippedEvidence: four signing DiLoCo replicas of a job,
// two of them colluding (their own workers train on random bytes and sign what they
// send); the honest workers name both, and the evidence each keeps, shipped as
// bytes, convicts both in the leader's judge built from the job's spec and plan, while the
// same evidence against an honest member does not.
//
// At d_model 64 the evidence is larger than an RPC message (consensus.MaxEvidenceBytes):
// the judge convicts from it all the same (it travels as a blob, node/evidence_blob.go).
func TestLeaderConvictsColludersFromShippedEvidence(t *testing.T) {
	diloco := func(*jobspec.Spec) {}
	for _, dModel := range []int{32, 64} {
		t.Run(fmt.Sprintf("d_model=%d", dModel), func(t *testing.T) { convictColluders(t, dModel, 1, diloco) })
	}
	// ZeRO-1 (scored: its gradients are then gathered whole and signed against the
	// weights) and streaming DiLoCo (each fragment signed against every fragment's
	// anchors at its launch) convict from their evidence the same way.
	t.Run("zero1", func(t *testing.T) {
		convictColluders(t, 32, 1, func(s *jobspec.Spec) {
			s.Parallel.Sync, s.Memory.Zero, s.Parallel.Score = jobspec.SyncEveryStep, 1, jobspec.ScoreOn
		})
	})
	// Replicas of two pipeline stages under every-step sync: each stage scores on the
	// whole model from the stage weight mirror, and its evidence ships the other stage's
	// mirrored weights, bound by the group's signatures.
	t.Run("pipelined-sync", func(t *testing.T) {
		convictColluders(t, 32, 2, func(s *jobspec.Spec) {
			s.Parallel.Sync, s.Parallel.Score = jobspec.SyncEveryStep, jobspec.ScoreOn
		})
	})
	// Audited (parallel.audit, through the default int8 codec, unscored): the colluders'
	// work on other data is not what their batches give; every honest member recomputes
	// them at the first gather, names them at once, and the leader's re-judge, which
	// recomputes them on the job's dataset, convicts them.
	t.Run("audited", func(t *testing.T) {
		convictColluders(t, 32, 1, func(s *jobspec.Spec) {
			s.Parallel.Audit, s.Parallel.Score = jobspec.Pinned(4), jobspec.ScoreOff
		})
	})
	t.Run("streaming", func(t *testing.T) {
		convictColluders(t, 32, 1, func(s *jobspec.Spec) {
			s.Parallel.Sync, s.Parallel.InnerSteps, s.Parallel.Fragments, s.Parallel.OverlapSteps = jobspec.SyncStreaming, 4, 2, 1
		})
	})
}

// convictColluders is TestLeaderConvictsColludersFromShippedEvidence at model width
// dModel, with replicas of stages pipeline stages (replicas 2 and 3 colluding at every
// stage) and the sync settings set changes.
func convictColluders(t *testing.T, dModel, stages int, set func(*jobspec.Spec)) {
	s := smallSpec(t)
	s.Model.DModel = dModel
	s.Parallel.Sync, s.Parallel.InnerSteps, s.Train.Steps, s.Train.Batch = jobspec.SyncDiLoCo, 3, 12, 8
	set(&s)
	s.Data.Blob = "dataset"
	data, err := model.LoadDataset(s.Data.Source, s.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 20000)
	for i := range junk {
		junk[i] = byte(rng.IntN(256))
	}
	noise := &model.Dataset{Source: "noise", Train: model.ByteTokens(junk), Val: data.Val, Vocab: 256}
	n := 4 * stages
	ids, keys := make([]string, n), make([]ed25519.PrivateKey, n) // ids[r*stages+p]: replica r's stage p
	var jp scheduler.JobPlan
	L := scheduler.ModelConfig(s).NumLayers()
	for i := range ids {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		raw, err := k.Raw()
		if err != nil {
			t.Fatal(err)
		}
		ids[i], keys[i] = id.String(), ed25519.PrivateKey(raw)
	}
	for r := range 4 {
		var replica []scheduler.Stage
		for p := range stages {
			replica = append(replica, scheduler.Stage{Node: ids[r*stages+p], First: p * L / stages, Last: (p + 1) * L / stages})
		}
		jp.Replicas = append(jp.Replicas, replica)
		jp.Batches = append(jp.Batches, s.Train.Batch/4)
	}
	jp.MicroBatches = 1
	raw, err := json.Marshal(jp)
	if err != nil {
		t.Fatal(err)
	}
	job := consensus.Job{ID: "j", Spec: s, Plans: []consensus.PlanEpoch{{Epoch: 1, Plan: raw}}}
	net := parallel.NewInMemory(ids...)
	t.Cleanup(net.Close)
	workers := make([]*parallel.Worker, n)
	for i := range workers {
		cfg, own := jobConfig(job, 1, jp), data
		if i >= 2*stages {
			own = noise
		}
		w, err := parallel.NewWorker(cfg, EnginePlan(jp), ids[i], keyedPeer{net.Peer(ids[i]), keys[i]}, own)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Close() })
		workers[i] = w
	}
	named := map[int][]string{}
	for range s.Train.Steps {
		var wg sync.WaitGroup
		res, errs := make([]parallel.StepResult, n), make([]error, n)
		for i, w := range workers {
			wg.Go(func() { res[i], errs[i] = w.Step(context.Background()) })
		}
		wg.Wait()
		for i := range workers {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			named[i] = append(named[i], res[i].Offenders...)
		}
	}
	c := newCluster(t)
	r := c.runners[0]
	r.cfg.Datasets = blobDataset{data: data}
	for h := range 2 * stages {
		bad := []string{ids[2*stages+h%stages], ids[3*stages+h%stages]} // h's stage group's colluders
		slices.Sort(named[h])
		if want := slices.Sorted(slices.Values(bad)); !slices.Equal(named[h], want) {
			t.Fatalf("honest worker %d named %v, want both colluders", h, named[h])
		}
		for _, bad := range bad {
			ev := workers[h].Evidence(bad)
			if ev == nil {
				t.Fatalf("honest worker %d kept no evidence against %s", h, bad)
			}
			if stages > 1 && len(ev.Others) != stages {
				t.Fatalf("worker %d's evidence carries %d stages' mirrored weights, want the replica's %d", h, len(ev.Others), stages)
			}
			raw := ev.Marshal()
			if dModel >= 64 && len(raw) <= consensus.MaxEvidenceBytes {
				t.Fatalf("evidence of %d bytes at d_model %d: within the RPC's %d, the test proves nothing larger", len(raw), dModel, consensus.MaxEvidenceBytes)
			}
			if bound := scheduler.EvidenceBound(s, len(ids)); int64(len(raw)) > bound {
				t.Fatalf("evidence of %d bytes over the bound a leader fetches (%d)", len(raw), bound)
			}
			start := time.Now()
			convicted, why, err := r.JudgeEvidence(context.Background(), job, ids[h], bad, raw)
			took := time.Since(start)
			if err != nil || !convicted {
				t.Fatalf("worker %d's evidence against %s: convicted %v (%s), %v", h, bad, convicted, why, err)
			}
			t.Logf("worker %d against %s (%d bytes, judged in %v): %s", h, bad[len(bad)-6:], len(raw), took, why)
		}
	}
	ev := workers[0].Evidence(ids[2*stages])
	if convicted, why, err := r.JudgeEvidence(context.Background(), job, ids[0], ids[stages], ev.Marshal()); err != nil || convicted {
		t.Fatalf("evidence against an honest member: convicted %v (%s), %v", convicted, why, err)
	}
}

// TestEvidenceShippedInTurn: a worker that names two colluders at once ships both
// evidences, the second after the leader refused it for its rate (one per reporter per
// consensus.EvidenceInterval); shipping both at once dropped the second for good. A
// failure other than the rate is not retried.
func TestEvidenceShippedInTurn(t *testing.T) {
	var shipped []string
	calls := 0
	ship := func(_ context.Context, member string, _ []byte) error {
		calls++
		if calls == 2 || member == "bad" {
			return fmt.Errorf("leader: %w", consensus.ErrBusy)
		}
		if member == "refused" {
			return errors.New("not a plan node")
		}
		shipped = append(shipped, member)
		return nil
	}
	var failed []string
	evs := []namedEvidence{{member: "c"}, {member: "d"}, {member: "refused"}, {member: "bad"}}
	shipInTurn(context.Background(), ship, evs, 0, func(m string, _ error) { failed = append(failed, m) })
	if !slices.Equal(shipped, []string{"c", "d"}) {
		t.Errorf("shipped %v, want [c d]", shipped)
	}
	if !slices.Equal(failed, []string{"refused", "bad"}) {
		t.Errorf("given up %v, want [refused bad]", failed)
	}
	if want := 2 + 1 + 1 + evidenceTries; calls != want {
		t.Errorf("%d calls, want %d (the busy one retried, the refused one not, the always-busy one %d times)", calls, want, evidenceTries)
	}
}
