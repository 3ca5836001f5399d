package parallel

// gatherPolicy is how every-step sync's gather of run i aggregates: the worker's rule,
// the gradient score (or the contested one under score auto), and signatures over the
// current weights (the same bits on every replica at a step's sync). A leader checking
// evidence builds the same policy on a worker of its own (VerifyEvidence).
func (s everyStep) gatherPolicy(i int) policy {
	w := s.w
	pol := w.policy()
	pol.score = w.gradientScore(i)
	pol.scoreContested, pol.lengthContested = w.contestedScore(i), w.contestedLength
	pol.sign = w.signer(func() [][]float32 {
		out := make([][]float32, len(w.runs))
		for r := range w.runs {
			out[r] = flattenValues(w.runParams[r])
		}
		return out
	})
	return pol
}

// gatherPolicy is how DiLoCo's outer gather of run i aggregates: the worker's rule, the
// outer score and length rule, and signatures over the anchors (the weights every
// replica took at the last outer step; its inner steps moved its own weights apart).
func (s *dilocoSync) gatherPolicy(i int) policy {
	pol := s.w.policy()
	pol.score = s.outerScore(i)
	pol.length = s.outerLength(i)
	pol.sign = s.w.signer(func() [][]float32 {
		out := make([][]float32, len(s.outer))
		for r, o := range s.outer {
			out[r] = o.anchor
		}
		return out
	})
	return pol
}

// gatherPolicer is a sync strategy whose gathers a leader can re-judge from evidence.
type gatherPolicer interface{ gatherPolicy(i int) policy }

// signer is the signer of this worker's collectives against the θ thetas returns (every
// run's flat weights at the shared point); nil when the worker has no node key. With
// thetas nil the contributions are signed against the zero digest (ZeRO's gathers, whose
// replicas hold shards) and no evidence is kept: nothing could re-score it.
func (w *Worker) signer(thetas func() [][]float32) *signer {
	if w.signKey == nil {
		return nil
	}
	s := &signer{key: w.signKey, theta: func() [thetaLen]byte { return [thetaLen]byte{} }}
	if thetas != nil {
		s.thetas = thetas
		s.theta = lazyTheta(func() [thetaLen]byte { return thetaDigest(thetas()...) })
		s.keep = w.evidence.keep
	}
	return s
}
