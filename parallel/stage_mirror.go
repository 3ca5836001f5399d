package parallel

import (
	"context"
)

// The stage weight mirror scores every-step sync's and ZeRO's gradients in a replica cut
// into pipeline stages (issue 25), as a one-stage replica's are: on the whole model. A
// stage node holds only its own layers, but under every-step sync (and ZeRO, whose
// all-gather leaves every replica the same parameters) every honest replica holds the
// same weights after each step, so any stage node's weights are valid for every replica.
// Every MirrorEvery steps (step 0 included), before the step's gradient collectives, each
// stage node sends its stage's current weights (float32, exact bits) to the other stage
// nodes of its replica (exchangeStages, as DiLoCo's anchors travel) and loads theirs into
// its scorer's copy of the whole model. Its gradient score then moves its own run's part
// from its own current weights with the other stages at their mirrored weights, at most
// MirrorEvery−1 steps stale. Every honest member of a stage group mirrors at the same
// steps the same bits, so all compute the same scores and drop the same contributions.
//
// A step whose mirror the worker does not hold (its period's mirror happened before a
// restore, or never) falls back, explicitly, to the unscored checks: a mirror taken at
// another step would give this member scores its group's other members do not compute.
// After a restore the worker mirrors again at the next multiple of MirrorEvery.
//
// Frames: kind reduce, float32, index mirrorIndex, the step's number (steps completed),
// micro the sending stage; bounded and checked against the sending stage's parameter
// count before anything is decoded (heldOutScorer.loadStage). A frame that does not match
// fails the step with an error naming the stage. It costs each stage node, every
// MirrorEvery steps, the model's parameters less its own stage's, as float32, and under
// score: auto a copy of the whole model held from the start (the scorer the mirror loads
// into; a one-stage replica builds it the first time a collective is contested).

// MirrorEvery is how many steps apart the stage weight mirror runs. At 4 it costs a stage
// node of a two-stage replica a quarter of its stage's float32 weights per step, next to
// the gradient all-reduce's two stage's worth, and the other stages are scored at weights
// at most three steps old (a few learning rates: the score's probe is GradientProbe·LR
// long along one stage's gradient, and the drops in the in-bound table are the same as a
// one-stage replica's).
const MirrorEvery = 4

// mirrorIndex is the frame index of the stage weight mirror (below anchorIndex).
const mirrorIndex = 0xfffb

// pipelineScorer is the scorer that a pipelined replica's stage node scores gradient
// collectives with (score: on, or auto's, built ahead for the mirror to load), nil where
// the worker scores none or holds the whole model.
func (w *Worker) pipelineScorer() *heldOutScorer {
	if w.numStages <= 1 {
		return nil
	}
	if w.scorer != nil {
		return w.scorer
	}
	if w.onDemand != nil {
		return w.onDemand.s
	}
	return nil
}

// mirrorStages runs the stage weight mirror at the steps it is due; nothing for a worker
// without a pipelined scorer.
func (w *Worker) mirrorStages(ctx context.Context) error {
	sc := w.pipelineScorer()
	if sc == nil || w.step%MirrorEvery != 0 {
		return nil
	}
	w.mirrorAt = -1 // a failed mirror leaves no stale one in use
	if err := w.exchangeStages(ctx, sc, mirrorIndex, "weights", w.stageWeights()); err != nil {
		return err
	}
	w.mirrorAt = w.step
	return nil
}

// stageWeights is this stage's runs' current flat weights, in layer order: what the
// mirror sends, and this stage's part of the model a gradient score reads.
func (w *Worker) stageWeights() []float32 {
	var own []float32
	for _, ps := range w.runParams {
		own = append(own, flattenValues(ps)...)
	}
	return own
}

// mirroredModel is every stage's weights the gradient score of this step reads, in
// stage order: the other stages' as the mirror loaded them into sc, this stage's its
// runs' current weights (the same bits on every replica of its group at a step's sync,
// as the θ its contributions are signed against). Its digest is what a pipelined
// replica's scored contributions bind beside θ's (gradientPolicy); evidence ships the
// other stages' (Evidence.Others), and a leader rebuilds the same from them and θ
// (Evidence.modelDigest).
func (w *Worker) mirroredModel(sc *heldOutScorer) [][]float32 {
	out := sc.stageAnchors(w.stage)
	out[w.stage] = w.stageWeights()
	return out
}

// mirrored says whether the worker holds the other stages' weights its gradient score
// needs at this step: always in a one-stage replica; in a pipelined one, the mirror of
// this step's period.
func (w *Worker) mirrored() bool {
	return w.numStages <= 1 || (w.mirrorAt >= 0 && w.mirrorAt == w.step-w.step%MirrorEvery)
}

// buildScorer builds the worker's held-out scorer: the whole model as its stage is built,
// with the copy's parameters of each other stage of its replica, which the anchor
// exchange or the stage weight mirror loads.
func (w *Worker) buildScorer() (*heldOutScorer, error) {
	s, err := newHeldOutScorer(w.cfg.Train, w.data, w.runs)
	if err != nil {
		return nil, err
	}
	s.stageParams = stageAnchorParams(s.layers, w.plan, w.replica, w.stage)
	return s, nil
}
