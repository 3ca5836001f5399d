package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/scheduler"
)

// TestEvidenceBlobChain: on three real nodes running a job, a worker's evidence larger
// than an RPC message (consensus.MaxEvidenceBytes) reaches the leader as a blob fetched
// from the reporter, is judged byte for byte (a judge standing in for the engine's, which
// the runner's tests exercise), the verdict is committed, scheduler.Offenders names the
// convicted member and the job's next plan leaves it out; the leader keeps no copy of the
// blob (the reporter serves it for evidenceOfferTTL, then deletes it).
// Through the same fetch path the leader refuses a blob the reporter did not announce
// (the reporter does not serve it), a blob a job names (its dataset: the leader may be
// fetching it for the job, and must not delete it after), and a size over the job's
// bound, and keeps none of them.
func TestEvidenceBlobChain(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a small model on three in-process nodes")
	}
	nodes := startEngineMesh(t, 3)
	var mu sync.Mutex
	var judged [][]byte
	for _, n := range nodes { // whichever leads judges: the stand-in convicts on any bytes
		n.Consensus().SetEvidenceJudge(func(_ context.Context, _ consensus.Job, _, _ string, ev []byte) (bool, string, error) {
			mu.Lock()
			judged = append(judged, ev)
			mu.Unlock()
			return true, "the stand-in judge convicts", nil
		})
	}
	spec := jobspec.DefaultSpec()
	spec.Model = jobspec.Model{Layers: 4, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Data = jobspec.Data{Source: writeCorpus(t, "for i := range n { sum += i * i } // mesh\n", 1500)}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 100000, 8, jobspec.Fixed(2), 1000, 2
	spec.Parallel.Replicas = jobspec.Fixed(1)
	spec.Placement.Strategy = jobspec.StrategyEven // every node holds a stage
	spec.Checkpoint.Every = 5
	id := submitThroughAPI(t, nodes[0], spec)
	job := func() consensus.Job {
		j, _, _ := nodes[0].Consensus().Job(context.Background(), id, false)
		return j
	}
	var leader, reporter, accused *Node
	testutil.WaitFor(t, 90*time.Second, "the job running on all three nodes with a checkpoint, and a leader", func() bool {
		j := job()
		leader, reporter, accused = nil, nil, nil
		for _, n := range nodes {
			switch {
			case n.Consensus().IsLeader():
				leader = n
			case reporter == nil:
				reporter = n
			default:
				accused = n
			}
		}
		return leader != nil && accused != nil && j.Status == consensus.JobRunning && len(planNodes(j)) == 3 &&
			hasCompleteCheckpoint(j, 6, func(n string) bool { return n != accused.ID().String() })
	})
	j := job()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Through the fetch path, the leader gets only an evidence blob the reporter announced.
	other, err := reporter.Blobs().Publish(ctx, bytes.NewReader(randomBytes(t, 4096)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.fetchEvidence(ctx, j, reporter.ID(), other, 4096); err == nil || leader.Blobs().Has(other) {
		t.Fatalf("a blob the reporter did not announce: fetched (%v), held %v", err, leader.Blobs().Has(other))
	}
	if _, err := leader.fetchEvidence(ctx, j, reporter.ID(), j.Spec.Data.Blob, 4096); err == nil || !strings.Contains(err.Error(), "a job's dataset") || !leader.Blobs().Has(j.Spec.Data.Blob) {
		t.Fatalf("the job's dataset as evidence: %v, the leader still holds it: %v", err, leader.Blobs().Has(j.Spec.Data.Blob))
	}
	if _, err := leader.fetchEvidence(ctx, j, reporter.ID(), other, evidenceBound(j)+1); !errors.Is(err, blob.ErrTooLarge) {
		t.Fatalf("a size over the job's bound: %v, want blob.ErrTooLarge", err)
	}

	// An announced evidence blob is served to the leader only, and only while announced.
	withdraw := reporter.evidence.add(other)
	if ok, err := reporter.serveEvidence(accused.ID(), other); !ok || err == nil {
		t.Fatalf("an announced evidence blob to a non-leader: announced %v, refused %v", ok, err)
	}
	if ok, err := reporter.serveEvidence(leader.ID(), other); !ok || err != nil {
		t.Fatalf("an announced evidence blob to the leader: announced %v, %v", ok, err)
	}
	withdraw()
	if ok, _ := reporter.serveEvidence(leader.ID(), other); ok {
		t.Fatal("a withdrawn evidence blob is still announced")
	}

	// Evidence the leader refuses (against the reporter itself) is dropped at once.
	refused := randomBytes(t, consensus.MaxEvidenceBytes+1)
	if err := (nodeControl{reporter}).ShipEvidence(ctx, id, reporter.ID().String(), refused); !errors.Is(err, consensus.ErrForbidden) {
		t.Fatalf("evidence against the reporter itself: %v, want ErrForbidden", err)
	}
	if rid := reporter.Blobs().Store().IDOf(refused); reporter.Blobs().Has(rid) || reporter.evidence.has(rid) {
		t.Fatalf("a refused evidence blob is kept (%v) or offered (%v)", reporter.Blobs().Has(rid), reporter.evidence.has(rid))
	}

	// The chain: evidence over the RPC's bound, shipped as the runner ships it; the leader
	// takes it up, then fetches and judges it in the background.
	bound := evidenceBound(j)
	if bound <= int64(consensus.MaxEvidenceBytes) {
		t.Fatalf("the job's evidence bound %d is within the RPC's %d: the test ships nothing larger", bound, consensus.MaxEvidenceBytes)
	}
	ev := randomBytes(t, consensus.MaxEvidenceBytes+int(bound-int64(consensus.MaxEvidenceBytes))/2)
	shipped := time.Now()
	if err := (nodeControl{reporter}).ShipEvidence(ctx, id, accused.ID().String(), ev); err != nil {
		t.Fatalf("ship %d bytes of evidence: %v", len(ev), err)
	}
	bad := accused.ID().String()
	testutil.WaitFor(t, 60*time.Second, "the verdict", func() bool {
		return slices.ContainsFunc(job().Verdicts, func(v consensus.Verdict) bool { return v.Member == bad && v.Convicted })
	})
	t.Logf("%d bytes of evidence shipped as a blob: verdict committed %s after shipping", len(ev), time.Since(shipped).Round(time.Millisecond))
	mu.Lock()
	if len(judged) != 1 || !bytes.Equal(judged[0], ev) {
		t.Fatalf("judged %d evidences, want the %d bytes shipped", len(judged), len(ev))
	}
	mu.Unlock()
	evID := reporter.Blobs().Store().IDOf(ev)
	if leader.Blobs().Has(evID) || !reporter.evidence.has(evID) {
		t.Fatalf("after judgement: the leader keeps the blob %v; the reporter still offers it %v", leader.Blobs().Has(evID), reporter.evidence.has(evID))
	}
	testutil.WaitFor(t, 90*time.Second, "a plan without the convicted member", func() bool {
		j = job()
		cur := j.CurrentPlan()
		return cur != nil && cur.Epoch > 0 && len(planNodes(j)) > 0 && !slices.Contains(planNodes(j), bad) && j.Status == consensus.JobRunning
	})
	if !scheduler.Offenders(scheduler.JobFromRecord(j))[bad] {
		t.Fatalf("scheduler.Offenders does not name the convicted %s: verdicts %+v", bad, j.Verdicts)
	}
}

// randomBytes returns n random bytes: a blob no other test or job holds.
func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
