package runner

import (
	"math"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// hasEveryReplica reports whether j's checkpoint of step holds optimizer files of all
// replicas: each replica's own weights and moments are in its own files, and a replica
// restored from another's resumes validly but not exactly.
func hasEveryReplica(j consensus.Job, step, replicas int) bool {
	seen := map[int]bool{}
	for _, m := range j.Checkpoints {
		for _, f := range m.Files {
			if m.Step == step && f.Kind == scheduler.FileOptimizer {
				seen[f.Replica] = true
			}
		}
	}
	return len(seen) == replicas
}

// TestRunnerResumesStreamingExactly: a streaming job (2 fragments, H = 4, τ = 1, int8) on
// two replicas (a and b, one stage each) checkpoints only where no fragment is in flight
// (not at 10, where fragment 1 is: at 11); a new epoch from that checkpoint restores each
// replica's own weights, residuals and outer momentum and finishes with the uninterrupted
// split run's validation loss, bit for bit.
func TestRunnerResumesStreamingExactly(t *testing.T) {
	s := smallSpec(t)
	s.Parallel.Sync, s.Parallel.Codec = jobspec.SyncStreaming, jobspec.CodecInt8
	s.Parallel.InnerSteps, s.Parallel.Fragments, s.Parallel.OverlapSteps = 4, 2, 1
	L := scheduler.ModelConfig(s).NumLayers()
	jp := scheduler.JobPlan{Replicas: [][]scheduler.Stage{{{Node: "a", First: 0, Last: L}}, {{Node: "b", First: 0, Last: L}}},
		Batches: []int{s.Train.Batch, s.Train.Batch}, MicroBatches: s.Train.MicroBatches.N}
	c := newCluster(t)
	var once sync.Once
	c.control.afterCheckpoint = func() {
		j, _, err := c.control.fsm.Job("j")
		if err != nil || !hasEveryReplica(j, 11, 2) {
			return
		}
		once.Do(func() {
			next := jp
			next.ResumeStep = 11
			if err := c.setPlan(2, next); err != nil {
				t.Errorf("commit epoch 2: %v", err)
			}
		})
	}
	c.submit(t, s, jp)
	j := c.runUntil(t)
	if j.Status != consensus.JobDone || j.Epoch() != 2 {
		t.Fatalf("job %s in epoch %d, want done in 2; events %+v", j.Status, j.Epoch(), j.Events)
	}
	for _, m := range j.Checkpoints {
		if m.Step == 10 {
			t.Errorf("a checkpoint at step 10, where fragment 1 is in flight")
		}
	}
	// The runner reports replica 0's training loss, the split run the replicas' mean: the
	// validation losses (of replica 0's weights, the same on both at the end) compare.
	want := localRunLosses(t, j, jp)[20][1]
	got := math.NaN()
	for _, p := range j.Progress {
		if p.Step == 20 && p.ValLoss != nil {
			got = *p.ValLoss
		}
	}
	if math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("step 20 after the resume: val %v; uninterrupted %v", got, want)
	}
}
