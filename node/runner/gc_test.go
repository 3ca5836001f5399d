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

// partsDatasets is noDatasets whose sharded datasets list parts.
type partsDatasets struct {
	noDatasets
	parts map[string][]string
}

func (d partsDatasets) DatasetParts(blob string) []string { return d.parts[blob] }

// TestOrphanBlobsAreCollected: a blob that no job references (neither a retained
// checkpoint's file nor a job's dataset, nor a shard its sharded dataset's manifest lists)
// is deleted once it is older than OrphanAge and the runner has seen it unreferenced that
// long; a job's dataset and its shards, a needed checkpoint file, a recent orphan, a
// pinned one and one first seen unreferenced just now stay.
func TestOrphanBlobsAreCollected(t *testing.T) {
	all := &memBlobs{stores: map[string]map[string][]byte{}, storedAt: map[string]time.Time{}}
	blobs := nodeBlobs{all: all, self: "a"}
	ids := map[string]string{}
	for _, name := range []string{"dataset", "shard", "ckpt", "old-orphan", "new-orphan", "pinned"} {
		id, err := blobs.Publish(t.Context(), []byte(name))
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = id
		all.storedAt["a/"+id] = time.Now().Add(-2 * time.Hour)
	}
	all.storedAt["a/"+ids["new-orphan"]] = time.Now()
	r, err := New(Config{Self: "a", DataDir: t.TempDir(), Blobs: blobs, Control: &fsmControl{}, Network: memNetwork{},
		Datasets: partsDatasets{parts: map[string][]string{ids["dataset"]: {ids["shard"]}}}, OrphanAge: time.Hour, PinFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r.pins.pin(ids["pinned"])
	job := consensus.Job{ID: "j", Spec: jobspec.DefaultSpec(), Status: consensus.JobRunning}
	job.Spec.Data.Blob, job.Spec.Data.TrainShards = ids["dataset"], 1
	job.Checkpoints = []consensus.CheckpointManifest{{Epoch: 1, Step: 10, Files: []consensus.CheckpointFile{
		{Kind: "model", Node: "a", Layers: [2]int{0, 5}, Hash: ids["ckpt"]}}}}
	r.sweepOrphans([]consensus.Job{job}) // a first look deletes nothing: it starts the clock
	if !blobs.Has(ids["old-orphan"]) {
		t.Fatal("an orphan was deleted on the first look (a restarted node's FSM may be behind)")
	}
	for _, name := range []string{"old-orphan", "new-orphan", "shard"} {
		r.unreferenced[ids[name]] = time.Now().Add(-2 * time.Hour) // as if an hour of looks passed
	}
	r.sweepOrphans([]consensus.Job{job})
	for name, want := range map[string]bool{"dataset": true, "shard": true, "ckpt": true, "old-orphan": false, "new-orphan": true, "pinned": true} {
		if got := blobs.Has(ids[name]); got != want {
			t.Errorf("%s held: %v, want %v", name, got, want)
		}
	}
	// A job the control plane no longer keeps leaves its dataset an orphan.
	r.sweepOrphans(nil)
	r.unreferenced[ids["dataset"]] = time.Now().Add(-2 * time.Hour)
	r.sweepOrphans(nil)
	if blobs.Has(ids["dataset"]) {
		t.Error("the dataset of a job no longer kept was not collected")
	}
}
