package testnet

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// stragglerReplanBound is the acceptance bound (issue 26): a node slowed mid-job is
// re-planned within it.
const stragglerReplanBound = 60 * time.Second

// measureCurrent is the scheduler's measure of d's current epoch (scheduler.MeasureEpoch).
func measureCurrent(d consensus.JobDetail) (scheduler.Measure, bool) {
	if d.Plan == nil {
		return scheduler.Measure{}, false
	}
	jp := planOf(d)
	j := scheduler.Job{Epoch: d.Plan.Epoch, Epochs: []scheduler.EpochPlan{{Epoch: d.Plan.Epoch, Plan: &jp}}}
	for _, s := range d.Progress.Samples {
		j.Progress = append(j.Progress, scheduler.Sample{Time: s.Time, Epoch: s.Epoch, Step: s.Step, StepS: s.StepSeconds})
	}
	return scheduler.MeasureEpoch(j, d.Plan.Epoch)
}

// TestSlowedNodeIsReplanned (issue 26, part 4): a one-node job runs on a testnet of three
// equal nodes until its epoch is measured and has a checkpoint; then its
// node is slowed 10× (`testnet slow`), which its profile does not show. The leader's
// straggler detector re-plans the job off that node within 60 s, and the new epoch trains.
func TestSlowedNodeIsReplanned(t *testing.T) {
	requireScenarios(t)
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	tn := startTestnet(t, oneRegion(3))
	var spec jobspec.Spec
	json.Unmarshal(faultJob(t, 50000), &spec)
	spec.Model.DModel, spec.Model.Context = 64, 64
	spec.Parallel.Stages = jobspec.Fixed(1)
	b, _ := spec.Document()
	w := submitJob(t, tn, tn.Nodes()[0], b)

	var d consensus.JobDetail
	// Measured (its early samples are the node's baseline), with a checkpoint to resume from
	// committed since the current plan. (Not one of the plan's epoch: a checkpoint is
	// recorded under the first epoch of its in-place chain, and this job is recalibrated in
	// place a few seconds in: scheduler.CheckpointEpoch.)
	steady := func() bool {
		d = w.detail()
		_, ok := measureCurrent(d)
		return ok && len(d.Checkpoints) > 0 && d.Checkpoints[len(d.Checkpoints)-1].Time.After(d.Plan.SetAt)
	}
	if err := tn.WaitFor(steady, 4*time.Minute); err != nil {
		t.Fatalf("the job's epoch was never measured with a checkpoint: %v; events %+v", err, d.Events)
	}
	m, _ := measureCurrent(d)
	t.Logf("epoch %d: predicted %.3g s/step, measured %.3g s (%.1f×)", d.Plan.Epoch, m.Predicted, m.Measured, m.Ratio())
	epoch, slowID := d.Plan.Epoch, planOf(d).Nodes()[0]
	var slow *Node
	for _, n := range tn.Nodes() {
		if n.ID == slowID {
			slow = n
		}
	}
	if err := SlowNode(context.Background(), tn.Dir(), slow.Spec.Name, 10); err != nil {
		t.Fatal(err)
	}
	slowedAt := time.Now()
	t.Logf("epoch %d on %s: slowed 10×", epoch, slow.Spec.Name)
	// The first epoch after the slowdown, with its event (committed right after it).
	var next uint64
	var why string
	moved := func() bool {
		d = w.detail()
		for _, ev := range d.Events {
			if ev.Epoch > epoch && (ev.Kind == jobspec.EventRebalance || ev.Kind == jobspec.EventReplan) {
				next, why = ev.Epoch, ev.Message
				return true
			}
		}
		return false
	}
	if err := tn.WaitFor(moved, stragglerReplanBound); err != nil {
		t.Fatalf("the slowed node was not re-planned within %s: %v; events %+v", stragglerReplanBound, err, d.Events)
	}
	t.Logf("epoch %d %s after the slowdown: %s", next, time.Since(slowedAt).Round(time.Second), why)
	if !strings.HasPrefix(why, "straggler:") || planOf(d).Has(slowID) {
		t.Errorf("epoch %d: %q, plan on %v; want a straggler re-plan without %s", next, why, planOf(d).Nodes(), slow.Spec.Name)
	}
	for _, ev := range d.Events {
		if ev.Kind == jobspec.EventRebalance || ev.Kind == jobspec.EventReplan {
			t.Logf("epoch %d: %s", ev.Epoch, ev.Message)
		}
	}
	trains := func() bool {
		d = w.detail()
		n := len(d.Progress.Samples)
		return n > 0 && d.Progress.Samples[n-1].Epoch >= next
	}
	if err := tn.WaitFor(trains, 2*time.Minute); err != nil {
		t.Fatalf("the new epoch does not train: %v; events %+v", err, d.Events)
	}
}
