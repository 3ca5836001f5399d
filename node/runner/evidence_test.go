package runner

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
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
	ev := (&parallel.Evidence{Job: 1, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{nil, nil}}).Marshal()
	for name, c := range map[string]struct {
		job      consensus.Job
		evidence []byte
		want     string
	}{
		"no plan":      {consensus.Job{ID: "j", Spec: s}, ev, "no plan"},
		"malformed":    {planned, []byte("MNEV\x01junk"), "offender evidence"},
		"no data blob": {planned, ev, "dataset blob"},
	} {
		convicted, _, err := r.JudgeEvidence(context.Background(), c.job, "a", "b", c.evidence)
		if err == nil || convicted || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: convicted %v, %v; want an error naming %q", name, convicted, err, c.want)
		}
	}
}
