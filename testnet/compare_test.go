package testnet

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

func TestVariantsForceTheParallelSection(t *testing.T) {
	vs, err := VariantsByName([]string{"planner", "sync", "pipeline", "diloco", "streaming"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"planner": "auto diloco 1", "sync": "2 sync 1", "pipeline": "1 sync 1", "diloco": "2 diloco 1", "streaming": "2 streaming 2"}
	for _, v := range vs {
		s := jobspec.DefaultSpec()
		v.Apply(&s.Parallel)
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", v.Name, err)
		}
		got := s.Parallel.Replicas.String() + " " + string(s.Parallel.Sync) + " " + itoa(s.Parallel.Fragments)
		if got != want[v.Name] {
			t.Errorf("%s: replicas, sync, fragments = %q, want %q", v.Name, got, want[v.Name])
		}
	}
	for _, bad := range [][]string{{"nope"}, {"sync", "sync"}, {}} {
		if _, err := VariantsByName(bad); err == nil {
			t.Errorf("VariantsByName(%q): no error", bad)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestTrialFromJob(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	val := func(v float64) *float64 { return &v }
	samples := []consensus.ProgressSample{
		{Time: t0.Add(3 * time.Second), Epoch: 1, Step: 0, ValLoss: val(5.5)},
		{Time: t0.Add(8 * time.Second), Epoch: 1, Step: 10, ValLoss: val(4)},
		{Time: t0.Add(13 * time.Second), Epoch: 1, Step: 20, ValLoss: val(3)},
		{Time: t0.Add(13 * time.Second), Epoch: 1, Step: 20, ValLoss: val(3)}, // repeated by a later poll
		{Time: t0.Add(18 * time.Second), Epoch: 1, Step: 30, ValLoss: val(3.2)},
		{Time: t0.Add(25 * time.Second), Epoch: 1, Step: 40, ValLoss: val(2.5)}, // past the budget
	}
	plan, _ := json.Marshal(scheduler.JobPlan{Replicas: [][]parallel.StagePlan{{{Node: "a"}, {Node: "b"}}, {{Node: "c"}, {Node: "d"}}}})
	job := consensus.JobDetail{Status: consensus.JobRunning, Plan: &consensus.PlanEpoch{Epoch: 1, Plan: plan}}
	job.Spec.Parallel.Sync = jobspec.SyncDiLoCo
	r := TrialFromJob("diloco", 1, job, samples, t0, 20*time.Second)
	if r.Plan != "2×2+2 diloco" || r.Steps != 30 || len(r.Curve) != 4 || r.Round != 1 {
		t.Fatalf("run %+v", r)
	}
	if r.FinalLoss() != 3.2 || r.BestLoss() != 3 || r.TimeTo(3.5) != 13 || !math.IsNaN(r.TimeTo(2)) {
		t.Fatalf("final %g best %g time to 3.5 %g time to 2 %g", r.FinalLoss(), r.BestLoss(), r.TimeTo(3.5), r.TimeTo(2))
	}
	if got := r.StepTimeS; math.Abs(got-0.5) > 1e-9 {
		t.Fatalf("step time %g, want 0.5 (the samples' 10 steps per 5 s)", got)
	}
	other := Trial{Curve: []LossPoint{{T: 5, Loss: 4}, {T: 9, Loss: 3.4}}}
	if got := CommonTarget([]Trial{r, other}); got != 3.4 {
		t.Fatalf("common target %g, want 3.4 (the highest best loss)", got)
	}
	if !math.IsNaN(CommonTarget([]Trial{r, {}})) {
		t.Fatal("a run without evaluations must leave no common target")
	}
}

func TestWritePlot(t *testing.T) {
	runs := []Trial{
		{Variant: "planner", Curve: []LossPoint{{T: 3, Loss: 5.5}, {T: 30, Loss: 3}, {T: 60, Loss: 2.7}}},
		{Variant: "diloco", Curve: []LossPoint{{T: 4, Loss: 5.5}, {T: 40, Loss: 2.9}}},
		{Variant: "planner", Round: 1, Curve: []LossPoint{{T: 3, Loss: 5.5}, {T: 50, Loss: 2.8}}},
	}
	var b bytes.Buffer
	if err := WritePlot(&b, "t<1>", runs, 90); err != nil {
		t.Fatal(err)
	}
	s := b.String()
	if !strings.HasPrefix(s, "<svg") || strings.Count(s, "<polyline") != 3 || !strings.Contains(s, "t&lt;1&gt;") ||
		!strings.Contains(s, ">diloco</text>") || strings.Count(s, ">planner</text>") != 1 || !strings.Contains(s, "stroke-dasharray") {
		t.Fatalf("plot:\n%s", s)
	}
	if got := ticks(0, 90, 6); len(got) < 4 || got[0] != 0 || got[len(got)-1] != 80 {
		t.Fatalf("ticks(0, 90) = %v", got)
	}
	if lo, hi := plotRange(runs); lo != 2.6 || hi != 3 {
		t.Fatalf("plot range %g..%g, want 2.6..3 (the untrained losses left out)", lo, hi)
	}
}
