package testnet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/meshnode/meshnode/records"
	"github.com/meshnode/meshnode/scheduler"
)

// planEpoch is a plan epoch whose plan predicts step seconds a step.
func planEpoch(t *testing.T, epoch uint64, step float64) *records.PlanEpoch {
	t.Helper()
	raw, err := json.Marshal(scheduler.JobPlan{PredictedStepS: step})
	if err != nil {
		t.Fatal(err)
	}
	return &records.PlanEpoch{Epoch: epoch, Plan: raw}
}

// The epoch log keeps each plan epoch's prediction as first seen and measures each epoch
// by the median of its samples past the warm-up, each sample counted once however often
// it is read; an epoch with too few samples is measured by all of them.
func TestEpochLogMeasuresEachEpochAgainstItsPrediction(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sample := func(epoch uint64, step int, s float64) records.ProgressSample {
		return records.ProgressSample{Time: t0.Add(time.Duration(step) * time.Second), Epoch: epoch, Step: step, StepSeconds: s}
	}
	var reads []records.JobDetail
	e1 := []records.ProgressSample{sample(1, 2, 5), sample(1, 4, 4), sample(1, 6, 0.7), sample(1, 8, 0.6), sample(1, 10, 0.8)}
	e2 := append(e1, sample(2, 12, 3), sample(2, 14, 0.3))
	reads = append(reads,
		records.JobDetail{Plan: planEpoch(t, 1, 0.2), Progress: records.ProgressView{Samples: e1[:3],
			Stages: []records.StageTimes{{Epoch: 1, Node: "a", Compute: 0.1}}}},
		records.JobDetail{Plan: planEpoch(t, 1, 0.2), Progress: records.ProgressView{Samples: e1}},
		records.JobDetail{Plan: planEpoch(t, 2, 0.7), Progress: records.ProgressView{Samples: e2}})
	l := newEpochLog()
	i := 0
	read := l.wrap(func(context.Context, string) (records.JobDetail, error) { i++; return reads[i-1], nil })
	for range reads {
		if _, err := read(context.Background(), "j"); err != nil {
			t.Fatal(err)
		}
	}
	got := l.epochs()
	if len(got) != 2 {
		t.Fatalf("%d epochs %+v, want 2", len(got), got)
	}
	if e := got[0]; e.Epoch != 1 || e.PredictedStepS != 0.2 || e.MeasuredStepS != 0.7 || e.Samples != 5 || e.Steps != 8 || e.Phases["a"].Compute != 0.1 {
		t.Errorf("epoch 1: %+v, want predicted 0.2 s, measured 0.7 s (median past 2 warm-up samples), 5 samples over 8 steps, a's compute 0.1 s", e)
	}
	if e := got[1]; e.Epoch != 2 || e.PredictedStepS != 0.7 || e.MeasuredStepS != 1.65 || e.Samples != 2 {
		t.Errorf("epoch 2: %+v, want predicted 0.7 s, measured 1.65 s (median of both, too few to skip any), 2 samples", e)
	}
}
