package consensus

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

func TestJobDetailJSON(t *testing.T) {
	h := newHarness(t)
	h.mustOK(JobSubmitType, JobSubmitRequest{ID: "j", Spec: jobspec.DefaultSpec(), Time: t0})
	j := h.job("j")
	b, err := json.Marshal(j.Detail(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id":"j"`, `"status":"submitted"`, `"plan":null`, `"progress":{"step":0,"steps":300,`, `"updated_at":null`, `"samples":[]`, `"events":[{`, `"applied_index":3`, `"spec":{"name":"job"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("detail lacks %s: %s", want, b)
		}
	}
	h.mustOK(PlanSetType, PlanSetRequest{JobID: "j", Epoch: 1, Plan: json.RawMessage(`{"k":1}`), Time: t0})
	h.mustOK(ProgressType, ProgressRequest{JobID: "j", Samples: []ProgressSample{{Time: t0, Step: 5, Loss: 2.5}, {Time: t0, Step: 6, Loss: 2.25}}})
	j = h.job("j")
	d := j.Detail(9)
	if d.Plan == nil || d.Plan.Epoch != 1 || d.Progress.Step != 6 || d.Progress.Loss != 2.25 || d.Progress.UpdatedAt == nil || len(d.Progress.Samples) != 2 {
		t.Fatalf("detail = %+v", d)
	}
	if s := j.Summary(); s.ID != "j" || s.Name != "job" || s.Status != JobSubmitted || !s.SubmittedAt.Equal(t0) {
		t.Fatalf("summary = %+v", s)
	}
}
