package jobspec

import "testing"

// TestResolvedScore: a data.local job is never scored (auto and "" resolve to off, and
// Validate refuses on); any other job runs with parallel.score as given, "" as auto.
func TestResolvedScore(t *testing.T) {
	for _, c := range []struct {
		local string
		score Score
		want  Score
		valid bool
	}{
		{"", "", ScoreAuto, true},
		{"", ScoreAuto, ScoreAuto, true},
		{"", ScoreOn, ScoreOn, true},
		{"", ScoreOff, ScoreOff, true},
		{"clinic-a", "", ScoreOff, true},
		{"clinic-a", ScoreAuto, ScoreOff, true},
		{"clinic-a", ScoreOff, ScoreOff, true},
		{"clinic-a", ScoreOn, ScoreOn, false},
	} {
		s := DefaultSpec()
		if c.local != "" {
			s.Data = Data{Local: c.local}
		}
		s.Parallel.Score = c.score
		if got := s.ResolvedScore(); got != c.want {
			t.Errorf("data.local %q, parallel.score %q: resolved %q, want %q", c.local, c.score, got, c.want)
		}
		if err := s.Validate(); (err == nil) != c.valid {
			t.Errorf("data.local %q, parallel.score %q: Validate() = %v, want valid %v", c.local, c.score, err, c.valid)
		}
	}
}
