package parallel

// gatherPolicy is how every-step sync's gather of run i aggregates: the worker's rule,
// the gradient score (or the contested one under score auto), and signatures over run
// i's current weights (the same bits on every replica of its group at a step's sync). A
// leader checking evidence builds the same policy on a worker of its own (VerifyEvidence).
func (s everyStep) gatherPolicy(i int) policy {
	w := s.w
	pol := w.policy()
	pol.score = w.gradientScore(i)
	pol.scoreContested, pol.lengthContested = w.contestedScore(i), w.contestedLength
	pol.equalise = pol.score != nil || pol.scoreContested != nil
	pol.sign = w.signer(func() [thetaLen]byte { return paramsDigest(w.runParams[i]) },
		func() []float32 { return flattenValues(w.runParams[i]) })
	return pol
}

// gatherPolicy is how DiLoCo's outer gather of run i aggregates: the worker's rule, the
// outer score and length rule, and signatures over run i's anchor (the weights every
// replica took at the last outer step; its inner steps moved its own weights apart).
func (s *dilocoSync) gatherPolicy(i int) policy {
	pol := s.w.policy()
	pol.score = s.outerScore(i)
	pol.length = s.outerLength(i)
	anchor := func() []float32 { return s.outer[i].anchor }
	pol.sign = s.w.signer(func() [thetaLen]byte { return thetaDigest(anchor()) }, anchor)
	return pol
}

// gatherPolicer is a sync strategy whose gathers a leader can re-judge from evidence.
type gatherPolicer interface{ gatherPolicy(i int) policy }

// signer is the signer of this worker's collectives of one run against the θ whose
// digest is theta (the run's flat weights at the point its group shares: only the run's
// own layers, since the members of a run's group may hold different other layers); nil
// when the worker has no node key. With theta nil the contributions are signed against the
// zero digest (ZeRO's and streaming's gathers) and no evidence is kept. Evidence (values:
// the run's weights) is kept only by a worker of one run: the held-out score loads every
// run's weights, and the signatures bind only the gathered run's.
func (w *Worker) signer(theta func() [thetaLen]byte, values func() []float32) *signer {
	if w.signKey == nil {
		return nil
	}
	s := &signer{key: w.signKey, theta: func() [thetaLen]byte { return [thetaLen]byte{} }}
	if theta != nil {
		s.theta = lazyTheta(theta)
		// A pipelined replica's scorer holds the other stages' anchors or mirrored
		// weights, which evidence does not carry: a leader could not re-run its score, so
		// it keeps none.
		if len(w.runs) == 1 && (w.numStages == 1 || (w.scorer == nil && w.onDemand == nil)) {
			s.thetas = func() [][]float32 { return [][]float32{values()} }
			s.keep = w.evidence.keep
		}
	}
	return s
}
