package scheduler

import "testing"

// TestCheckpointEpochIsTheInPlaceChainsStart: a checkpoint written in an in-place epoch
// is recorded under the first epoch of its chain of Continues plans, so that stages on
// either side of an in-place change write one manifest; an epoch that restarted from a
// checkpoint starts a chain, and one whose plan is not in the history counts as a start.
func TestCheckpointEpochIsTheInPlaceChainsStart(t *testing.T) {
	in, moved := &JobPlan{Continues: true}, &JobPlan{}
	j := Job{Epochs: []EpochPlan{{Epoch: 1, Plan: moved}, {Epoch: 2, Plan: in}, {Epoch: 3, Plan: in}, {Epoch: 4, Plan: moved}},
		Epoch: 5, Plan: in}
	for epoch, want := range map[uint64]uint64{1: 1, 2: 1, 3: 1, 4: 4, 5: 4, 7: 7} {
		if got := CheckpointEpoch(j, epoch); got != want {
			t.Errorf("epoch %d: checkpoints under epoch %d, want %d", epoch, got, want)
		}
	}
}
