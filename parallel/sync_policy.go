package parallel

import (
	"slices"
	"sync"
)

// gatherPolicy is how every-step sync's gather of run i aggregates: the worker's rule,
// the gradient score (or the contested one under score auto), and signatures over run
// i's current weights (the same bits on every replica of its group at a step's sync). A
// leader checking evidence builds the same policy on a worker of its own (VerifyEvidence).
func (s everyStep) gatherPolicy(i int) policy { return s.w.gradientPolicy(i) }

// gatherPolicy is how ZeRO's checked gather of run i aggregates (reduceShard): the
// gradients are every-step sync's, judged by its policy and signed against the run's
// weights before the step's update (every replica holds the same bits after the last
// parameter all-gather), so a leader re-judges its evidence as every-step sync's.
func (s *zeroSync) gatherPolicy(i int) policy { return s.w.gradientPolicy(i) }

// gradientPolicy is the policy of a gather of run i's gradients (every-step sync, ZeRO).
func (w *Worker) gradientPolicy(i int) policy {
	pol := w.policy()
	pol.score = w.gradientScore(i)
	pol.scoreContested, pol.lengthContested = w.contestedScore(i), w.contestedLength
	pol.equalise = pol.score != nil || pol.scoreContested != nil
	pol.sign = w.signer(func() [thetaLen]byte { return paramsDigest(w.runParams[i]) },
		func() []float32 { return flattenValues(w.runParams[i]) })
	w.auditPolicy(&pol, func() auditPoint {
		return auditPoint{theta: flattenValues(w.runParams[i]), start: w.step, span: 1} // before the step's update
	})
	if pol.sign != nil && w.numStages > 1 && (pol.score != nil || pol.scoreContested != nil) {
		// A pipelined replica's gradient score (every gather under score: on, a contested
		// one under auto) reads the other stages' weights the stage weight mirror brought
		// (stage_mirror.go): the signature binds the whole model's digest, and evidence
		// carries the other stages' weights, so a leader re-scores from weights the group
		// vouched for, not ones the reporter chose (othersBound). A step the worker holds
		// no mirror of is judged unscored and its evidence ships none, as its judge ran.
		sc := w.pipelineScorer()
		w.bindModel(pol.sign, func() [][]float32 { return w.mirroredModel(sc) })
	}
	return pol
}

// bindModel makes sign's contributions bind the digest of the whole model their score
// reads (model: every stage's values in stage order, this stage's included), and its
// evidence carry the other stages' (Evidence.Others, nil at this stage). One copy, taken
// when the first contribution is signed, serves the digest and the evidence alike: a
// gather that ends after the next anchor exchange or mirror keeps what it signed.
func (w *Worker) bindModel(sign *signer, model func() [][]float32) {
	whole := sync.OnceValue(model)
	sign.model = lazyTheta(func() [thetaLen]byte { return thetaDigest(whole()...) })
	if sign.keep != nil {
		sign.others = func() [][]float32 {
			out := slices.Clone(whole())
			out[w.stage] = nil
			return out
		}
	}
}

// gatherPolicy is how DiLoCo's outer gather of run i aggregates: the worker's rule, the
// outer score and length rule, and signatures over run i's anchor (the weights every
// replica took at the last outer step; its inner steps moved its own weights apart).
func (s *dilocoSync) gatherPolicy(i int) policy {
	pol := s.w.policy()
	pol.score = s.outerScore(i)
	pol.length = s.outerLength(i)
	anchor, from := func() []float32 { return s.outer[i].anchor }, s.anchorStep
	pol.sign = s.w.signer(func() [thetaLen]byte { return anchorDigest(from, anchor()) }, anchor)
	if pol.sign != nil {
		pol.sign.from = uint32(from)
	}
	s.w.auditPolicy(&pol, func() auditPoint {
		// The outer step follows the inner steps since the anchor was taken: the last
		// outer step, the restore (at any step), or the start.
		return auditPoint{theta: anchor(), start: from, span: s.w.step - from, outer: true}
	})
	if pol.sign != nil && s.w.numStages > 1 && pol.score != nil && s.canScore() {
		// A pipelined replica's score reads the other stages' anchors its replica sent:
		// the signature binds their digest too, and evidence carries them, so a leader
		// re-scores from anchors the group vouched for, not ones the reporter chose.
		s.w.bindModel(pol.sign, s.modelAnchors)
	}
	return pol
}

// gatherPolicy is how streaming DiLoCo's gather of run i launched at this step
// aggregates, as a leader re-judging its evidence needs it: DiLoCo's outer policy, scored
// from the anchors the evidence loads (every fragment's, launchSigner), which are the
// launch's frozen copy; the worker's own launch builds the same (launchSync).
func (s *streamingSync) gatherPolicy(i int) policy {
	pol := s.dilocoSync.gatherPolicy(i)
	if s.w.scorer == nil || len(s.w.runs[i].group.Members) < 3 {
		pol.score, pol.length = nil, nil
	}
	return pol
}

// gatherPolicer is a sync strategy whose gathers a leader can re-judge from evidence.
type gatherPolicer interface{ gatherPolicy(i int) policy }

// signer is the signer of this worker's collectives of one run against the θ whose
// digest is theta (the run's flat weights at the point its group shares: only the run's
// own layers, since the members of a run's group may hold different other layers); nil
// when the worker has no node key. With theta nil the contributions are signed against the
// zero digest and no evidence is kept. Evidence (values:
// the run's weights) is kept only by a worker of one run: the held-out score loads every
// run's weights, and the signatures bind only the gathered run's.
func (w *Worker) signer(theta func() [thetaLen]byte, values func() []float32) *signer {
	if w.signKey == nil {
		return nil
	}
	s := &signer{key: w.signKey, theta: func() [thetaLen]byte { return [thetaLen]byte{} }}
	if theta != nil {
		s.theta = lazyTheta(theta)
		// A pipelined replica's scorer holds the other stages' anchors (DiLoCo) or
		// mirrored weights (every-step sync, ZeRO): its evidence carries them, bound by
		// the members' signatures (bindModel).
		if len(w.runs) == 1 {
			s.thetas = func() [][]float32 { return [][]float32{values()} }
			s.keep = w.evidence.keep
		}
	}
	return s
}
