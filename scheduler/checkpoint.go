package scheduler

import "github.com/meshnode/meshnode/consensus/jobspec"

// CompleteCheckpoint is the job's latest checkpoint whose files hold every layer of the
// model, weights and moments, counting only files with a holder for which live says true
// (nil: every holder); ok is false when there is none.
func CompleteCheckpoint(j Job, live func(node string) bool) (Checkpoint, bool) {
	n := ModelConfig(j.Spec).NumLayers()
	for i := len(j.Checkpoints) - 1; i >= 0; i-- {
		if m := j.Checkpoints[i]; CheckpointSurvives(m, n, live) {
			return m, true
		}
	}
	return Checkpoint{}, false
}

// CheckpointEpoch is the epoch a checkpoint written in epoch is recorded under: the first
// of the chain of in-place epochs (JobPlan.Continues) that epoch belongs to. Workers take
// an in-place epoch over at their own next step, so the stages writing one step's
// checkpoint can be in two epochs of one chain; they train one trajectory, and their
// files are one checkpoint, which the control plane joins into one manifest only under
// one epoch. Recorded under each stage's own epoch, a checkpoint that straddled a
// recalibration was split in two manifests, neither complete (a CI run of
// TestStageNodeLossResumesFromCheckpoint: step 35 under epochs 2 and 3). An epoch whose
// plan is not in j's history counts as the chain's start.
func CheckpointEpoch(j Job, epoch uint64) uint64 {
	plans := map[uint64]*JobPlan{}
	for _, e := range j.Epochs {
		plans[e.Epoch] = e.Plan
	}
	if j.Plan != nil {
		plans[j.Epoch] = j.Plan
	}
	for epoch > 1 {
		if p := plans[epoch]; p == nil || !p.Continues {
			break
		}
		epoch--
	}
	return epoch
}

// CheckpointSurvives reports whether m's files, counting only those with a holder for which
// live says true (nil: all), hold every one of numLayers layers, weights and moments: a job
// can resume from it.
func CheckpointSurvives(m Checkpoint, numLayers int, live func(node string) bool) bool {
	return covers(m, FileModel, numLayers, live) && covers(m, FileOptimizer, numLayers, live)
}

func covers(m Checkpoint, kind string, numLayers int, live func(string) bool) bool {
	held := make([]bool, numLayers)
	for _, f := range m.Files {
		if f.Kind != kind || (live != nil && !live(f.Node)) {
			continue
		}
		for l := max(0, f.Layers[0]); l <= f.Layers[1] && l < numLayers; l++ {
			held[l] = true
		}
	}
	for _, h := range held {
		if !h {
			return false
		}
	}
	return true
}

// NewestWritten is the step of the newest checkpoint any stage of the job wrote, complete
// or not (0: none).
func NewestWritten(j Job) int {
	written := 0
	for _, m := range j.Checkpoints {
		written = max(written, m.Step)
	}
	return written
}

// NeededCheckpoints reports, for each of the job's checkpoints, whether its files are
// kept: those of its newest checkpoint.keep checkpoints and of its latest complete one (a
// recovery resumes from it and `meshnode export` assembles it), whatever its status.
func NeededCheckpoints(j Job) []bool {
	newest := len(j.Checkpoints) - max(1, j.Spec.Checkpoint.Keep)
	complete, ok := CompleteCheckpoint(j, nil)
	needed := make([]bool, len(j.Checkpoints))
	for i, m := range j.Checkpoints {
		needed[i] = i >= newest || ok && m.Epoch == complete.Epoch && m.Step == complete.Step
	}
	return needed
}

// RetainedCheckpoints splits the checkpoint files the jobs list into those some job still
// needs (NeededCheckpoints) and those none does. A file is content-addressed: one that any
// job needs is kept for all.
func RetainedCheckpoints(jobs []Job) (keep, drop map[string]bool) {
	keep, drop = map[string]bool{}, map[string]bool{}
	for _, j := range jobs {
		needed := NeededCheckpoints(j)
		for i, m := range j.Checkpoints {
			for _, f := range m.Files {
				if needed[i] {
					keep[f.Hash] = true
				} else {
					drop[f.Hash] = true
				}
			}
		}
	}
	for h := range keep {
		delete(drop, h)
	}
	return keep, drop
}

// StepsRedone is how many steps each new epoch of a job repeated: for every epoch that
// resumed from a checkpoint (a replan or rebalance event), the furthest step its previous
// epoch's workers reported reaching (stopped or failed) minus the step it resumed from.
// The map is keyed by the new epoch; epochs whose predecessors reported nothing are left
// out.
func StepsRedone(events []Event) map[uint64]int {
	reached := map[uint64]int{}
	for _, ev := range events {
		if ev.Kind == jobspec.EventWorkerStopped || ev.Kind == jobspec.EventWorkerFailed {
			reached[ev.Epoch] = max(reached[ev.Epoch], ev.Step)
		}
	}
	out := map[uint64]int{}
	for _, ev := range events {
		if r, ok := reached[ev.Epoch-1]; ok && (ev.Kind == jobspec.EventReplan || ev.Kind == jobspec.EventRebalance) {
			out[ev.Epoch] = max(0, r-ev.Step)
		}
	}
	return out
}
