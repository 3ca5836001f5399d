package scheduler

import (
	"maps"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

func TestStepsRedone(t *testing.T) {
	events := []Event{
		{Kind: jobspec.EventWorkerStopped, Epoch: 1, Step: 130},
		{Kind: jobspec.EventWorkerFailed, Epoch: 1, Step: 142},
		{Kind: jobspec.EventReplan, Epoch: 2, Step: 100},
		{Kind: jobspec.EventWorkerStopped, Epoch: 2, Step: 250},
		{Kind: jobspec.EventRebalance, Epoch: 3, Step: 200},
		{Kind: jobspec.EventRebalance, Epoch: 5, Step: 300}, // epoch 4 reported nothing
	}
	want := map[uint64]int{2: 42, 3: 50}
	if got := StepsRedone(events); !maps.Equal(got, want) {
		t.Errorf("steps redone %v, want %v", got, want)
	}
}

func TestCheckpointSurvivesOnlyWithEveryLayerHeld(t *testing.T) {
	s := spec()
	n := ModelConfig(s).NumLayers()
	half := Checkpoint{Step: 10, Files: []CheckpointFile{
		{Kind: FileModel, Node: "a", Layers: [2]int{0, n/2 - 1}}, {Kind: FileOptimizer, Node: "a", Layers: [2]int{0, n/2 - 1}},
		{Kind: FileModel, Node: "b", Layers: [2]int{n / 2, n - 1}}, {Kind: FileOptimizer, Node: "b", Layers: [2]int{n / 2, n - 1}},
	}}
	notB := func(id string) bool { return id != "b" }
	if !CheckpointSurvives(half, n, nil) || CheckpointSurvives(half, n, notB) {
		t.Errorf("split checkpoint: survives %v, without b %v; want true, false", CheckpointSurvives(half, n, nil), CheckpointSurvives(half, n, notB))
	}
	weightsOnly := Checkpoint{Files: []CheckpointFile{{Kind: FileModel, Node: "a", Layers: [2]int{0, n - 1}}}}
	if CheckpointSurvives(weightsOnly, n, nil) {
		t.Error("a checkpoint without moments survives")
	}
	j := Job{Spec: s, Checkpoints: []Checkpoint{ckpt(s, 1, 100, "a"), half}}
	if m, ok := CompleteCheckpoint(j, notB); !ok || m.Step != 100 {
		t.Errorf("complete checkpoint without b: step %d ok %v, want 100", m.Step, ok)
	}
}

func TestRetainedCheckpoints(t *testing.T) {
	s := spec()
	s.Checkpoint.Keep = 2
	partial := Checkpoint{Epoch: 1, Step: 400, Files: []CheckpointFile{{Kind: FileModel, Node: "a", Layers: [2]int{0, 0}, Hash: "p"}}}
	j := Job{Spec: s, Checkpoints: []Checkpoint{ckpt(s, 1, 100, "a"), ckpt(s, 1, 200, "a"), ckpt(s, 1, 300, "a"), partial}}
	// Kept: the newest two (300, the partial 400) and the latest complete one (300).
	if got := NeededCheckpoints(j); got[0] || got[1] || !got[2] || !got[3] {
		t.Errorf("needed %v, want [false false true true]", got)
	}
	// Another job that still needs step 100's files keeps them for both.
	other := Job{Spec: s, Checkpoints: []Checkpoint{ckpt(s, 1, 100, "a")}}
	keep, drop := RetainedCheckpoints([]Job{j, other})
	old := ckpt(s, 1, 100, "a").Files[0].Hash
	mid := ckpt(s, 1, 200, "a").Files[0].Hash
	if !keep[old] || drop[old] || !drop[mid] || keep[mid] || !keep["p"] {
		t.Errorf("keep %v drop %v", keep, drop)
	}
}
