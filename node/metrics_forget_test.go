package node

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/parallel"
)

// TestTrainingMetricsOfDeletedJobsAreDropped: the training series of a job the FSM no
// longer keeps (retention dropped it) disappear (before: they were exported forever, one
// more set per job ever trained); a kept job's series stay.
func TestTrainingMetricsOfDeletedJobsAreDropped(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newTrainingMetrics(reg)
	for _, job := range []string{"gone", "kept"} {
		m.ObserveStep(job, parallel.StepTimes{Compute: 1})
		m.ObserveCheckpointWrite(job, 1)
		m.ObserveCheckpointReplication(job, 1)
		m.ObserveRejected(job, "12D3KooWpeer")
		m.ObserveSkipped(job)
	}
	m.forgetJobsExcept([]consensus.Job{{ID: "kept"}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, mf := range mfs {
		for _, met := range mf.GetMetric() {
			for _, l := range met.GetLabel() {
				if l.GetName() == "job" && l.GetValue() == "gone" {
					t.Errorf("%s still has a series of the deleted job", mf.GetName())
				}
				if l.GetName() == "job" && l.GetValue() == "kept" {
					kept++
				}
			}
		}
	}
	if kept != 9 { // 4 phases, steps, 2 checkpoint histograms, rejected, skipped
		t.Errorf("%d series of the kept job, want 9", kept)
	}
}
