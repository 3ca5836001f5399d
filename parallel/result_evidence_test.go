package parallel

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestDivergedResultConvicts: two colluders of four that send their DiLoCo update ×4 are
// not dropped (the length rule counts it at an honest size), keep the aggregate their own
// judge computes and end the collective with other bits. Each honest worker keeps the
// gather's signed contributions and signed result digests, and the leader convicts each
// colluder on them; the same evidence accusing the other honest member acquits it (its
// signed digest is the leader's aggregate to the bit), and a colluder's digest altered
// by the reporter is refused as forged.
func TestDivergedResultConvicts(t *testing.T) {
	collude := func(p signingPeer, _ []string) Transport { return wholeResigner{resigner{signingPeer: p, s: 4}} }
	run, cfg, plan, ids := colludedRunWith(t, 12, 2, collude, func(*JobConfig) {})
	for h := range 2 {
		w := run.Workers()[h]
		for _, bad := range ids[2:] {
			ev, wire := keptEvidence(t, w, h, bad)
			ok, why, err := VerifyEvidence(cfg, plan, testData(), wire, bad)
			if err != nil || !ok || !strings.Contains(why, "result") {
				t.Fatalf("worker %d's evidence against %s: convicted %v (%s), %v", h, bad, ok, why, err)
			}
			if ok, why, err := VerifyEvidence(cfg, plan, testData(), wire, ids[1-h]); err != nil || ok {
				t.Fatalf("the same evidence against honest %s: convicted %v (%s), %v", ids[1-h], ok, why, err)
			}
			forged, _ := UnmarshalEvidence(ev.Marshal())
			a := slices.Index(forged.Members, bad)
			forged.Results[a][0] ^= 1
			if _, _, err := VerifyEvidence(cfg, plan, testData(), forged, bad); !errors.Is(err, ErrForgedEvidence) {
				t.Fatalf("an altered result digest: %v, want forged", err)
			}
		}
	}
}

// TestParamChunkEvidenceConvicts: under ZeRO-1 with the mean, two colluders of four that
// shrink everything they send ×0.75 (their parameter chunks included, an unsigned path
// before) are refused by the AdamW step limit; each honest worker keeps their signed
// chunks with the weights before the step, and the leader convicts both on it. Weights
// or a chunk the reporter altered are refused as forged.
func TestParamChunkEvidenceConvicts(t *testing.T) {
	collude := func(p signingPeer, _ []string) Transport { return wholeResigner{resigner{signingPeer: p, s: 0.75}} }
	run, cfg, plan, ids := colludedRunWith(t, 12, 2, collude, func(c *JobConfig) {
		c.Sync.Mode, c.Sync.Zero = jobspec.SyncEveryStep, 1
	})
	for h := range 2 {
		w := run.Workers()[h]
		ev := keptOfKind(w, EvidenceParams)
		if ev == nil || !slices.Equal(ev.Dropped, slices.Sorted(slices.Values(ids[2:]))) {
			t.Fatalf("honest worker %d kept parameter evidence %+v, want against both colluders", h, ev)
		}
		wire, err := UnmarshalEvidence(ev.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range ids[2:] {
			ok, why, err := VerifyEvidence(cfg, plan, testData(), wire, bad)
			if err != nil || !ok || !strings.Contains(why, "parameter chunk") {
				t.Fatalf("worker %d's evidence against %s: convicted %v (%s), %v", h, bad, ok, why, err)
			}
		}
		if ok, _, err := VerifyEvidence(cfg, plan, testData(), wire, ids[1-h]); ok || err == nil {
			t.Fatalf("parameter evidence against honest %s: convicted %v, %v", ids[1-h], ok, err)
		}
		// The evidence holds the reporter's own signed chunk, genuine. Shipped by a colluder
		// against that honest owner, it is judged and acquits: an honest chunk moves no
		// weight past one AdamW step.
		byColluder, _ := UnmarshalEvidence(ev.Marshal())
		byColluder.Reporter = slices.Index(byColluder.Members, ids[2])
		if ok, why, err := VerifyEvidence(cfg, plan, testData(), byColluder, ids[h]); ok || err != nil || !strings.Contains(why, "within one AdamW step") {
			t.Fatalf("parameter evidence against honest %s's genuine chunk: convicted %v (%s), %v", ids[h], ok, why, err)
		}
		forged, _ := UnmarshalEvidence(ev.Marshal())
		forged.Theta[0][len(forged.Theta[0])-1] += 1
		if _, _, err := VerifyEvidence(cfg, plan, testData(), forged, ids[3]); !errors.Is(err, ErrForgedEvidence) {
			t.Fatalf("altered weights: %v, want forged", err)
		}
		forged, _ = UnmarshalEvidence(ev.Marshal())
		forged.Signed[slices.Index(forged.Members, ids[2])][0] ^= 1
		if _, _, err := VerifyEvidence(cfg, plan, testData(), forged, ids[2]); !errors.Is(err, ErrForgedEvidence) {
			t.Fatalf("an altered chunk: %v, want forged", err)
		}
	}
}

// TestEvidenceWithoutAnHonestContributionConvictsNobody: two colluders of four (×−15)
// hold every member's signed contribution of a gather. Shipped by a colluder as evidence
// against an honest member with the other honest member's contribution left out, the
// leader's judge would weigh the honest one against the colluders' alone (here it still
// kept it; contributions chosen for it need not let it), so the leader refuses gather
// evidence that lacks any member's contribution before judging.
func TestEvidenceWithoutAnHonestContributionConvictsNobody(t *testing.T) {
	run, cfg, plan, ids := colludedRunOf(t, 12, 2, true, -15, func(*JobConfig) {})
	honest := keptOfKind(run.Workers()[0], EvidenceGather, ids[2])
	if honest == nil {
		t.Fatal("the honest worker kept no evidence")
	}
	forged, _ := UnmarshalEvidence(honest.Marshal())
	forged.Reporter = slices.Index(forged.Members, ids[2]) // a colluder reports
	forged.Signed[slices.Index(forged.Members, ids[0])] = nil
	forged.Results = nil
	ok, why, err := VerifyEvidence(cfg, plan, testData(), forged, ids[1])
	if ok || !errors.Is(err, errEvidence) {
		t.Fatalf("evidence without an honest contribution, against the other honest member: convicted %v (%s), %v", ok, why, err)
	}
}
