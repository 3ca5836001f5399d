package jobspec

// Held-out scoring and federated data: one rule, read by the spec's validation and by the
// engine's configuration. Replicas of a data.local job share no held-out batch, and one
// replica's update may rightly raise the loss on another's data, so such a job is never
// scored: "auto" resolves to off there, and "on" is refused.

// ResolvedScore is the held-out scoring setting the job runs with: parallel.score as
// given ("" is auto), except that auto is off for a data.local job. The engine's
// configuration takes this value, never the field itself; what auto then scores is
// Score.Enabled's rule.
func (s Spec) ResolvedScore() Score {
	switch {
	case s.Data.Local != "" && s.Parallel.Score != ScoreOn:
		return ScoreOff
	case s.Parallel.Score == "":
		return ScoreAuto
	}
	return s.Parallel.Score
}

// validateScore refuses parallel.score: on with data.local (ResolvedScore's rule).
func (s Spec) validateScore(v *validator) {
	if s.Data.Local != "" && s.Parallel.Score == ScoreOn {
		v.addf("parallel.score", "on needs a held-out batch every replica shares; with data.local each replica has only its own data (use auto or off)")
	}
}
