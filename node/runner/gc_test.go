package runner

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// TestRetainedCheckpoints: a job keeps its newest checkpoint.keep checkpoints and its
// latest complete one even when that is older; a file any job keeps is kept.
func TestRetainedCheckpoints(t *testing.T) {
	spec := jobspec.DefaultSpec()
	spec.Checkpoint.Keep = 2
	L := scheduler.ModelConfig(spec).NumLayers()
	manifest := func(step int, complete bool, model, opt string) consensus.CheckpointManifest {
		last := L - 1
		if !complete {
			last = L - 2 // the last layer's files are missing
		}
		return consensus.CheckpointManifest{Epoch: 1, Step: step, Files: []consensus.CheckpointFile{
			{Kind: scheduler.FileModel, Node: "a", Layers: [2]int{0, last}, Hash: model},
			{Kind: scheduler.FileOptimizer, Node: "a", Layers: [2]int{0, last}, Hash: opt},
		}}
	}
	j := consensus.Job{ID: "j", Spec: spec, Checkpoints: []consensus.CheckpointManifest{
		manifest(10, true, "m10", "o10"),
		manifest(20, true, "m20", "shared"), // latest complete: kept although not among the newest two
		manifest(30, false, "m30", "o30"),
		manifest(40, false, "m40", "o40"),
	}}
	other := consensus.Job{ID: "k", Spec: spec, Checkpoints: []consensus.CheckpointManifest{
		manifest(5, true, "k5", "o30"), // the same bytes as a file j keeps
		manifest(6, true, "k6", "ko6"),
		manifest(7, true, "k7", "ko7"),
	}}
	if got := scheduler.NeededCheckpoints(JobView(j)); !(got[0] == false && got[1] && got[2] && got[3]) {
		t.Errorf("needed checkpoints of j: %v, want [false true true true]", got)
	}
	keep, drop := scheduler.RetainedCheckpoints(JobViews([]consensus.Job{j, other}))
	for _, h := range []string{"m20", "shared", "m30", "o30", "m40", "o40", "k6", "ko6", "k7", "ko7"} {
		if !keep[h] || drop[h] {
			t.Errorf("%s: keep %v, drop %v; want it kept", h, keep[h], drop[h])
		}
	}
	for _, h := range []string{"m10", "o10", "k5"} {
		if keep[h] || !drop[h] {
			t.Errorf("%s: keep %v, drop %v; want it dropped", h, keep[h], drop[h])
		}
	}
	if len(drop) != 3 {
		t.Errorf("drop %v, want m10, o10 and k5", drop)
	}
}

// TestPinnedBlobsExpire: a pin protects a file for its pinFor and is then forgotten.
func TestPinnedBlobsExpire(t *testing.T) {
	p := blobPins{pinFor: time.Hour}
	p.pin("h")
	if !p.pinned("h") || p.pinned("other") {
		t.Fatal("a fresh pin does not protect its file, or protects another")
	}
	p.pinFor = 0
	if p.pinned("h") || len(p.pins) != 0 {
		t.Fatal("an expired pin still protects its file")
	}
}
