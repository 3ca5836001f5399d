package parallel

import "testing"

// TestRebuildLeadCoversTheRoundTrips: the step a rebuild names is whole outer periods
// ahead of the source, twice as many as a round trip to it took (measured by two step
// queries), at least two: one period, the lead before, was passed on a loaded machine
// before the stages' requests came.
func TestRebuildLeadCoversTheRoundTrips(t *testing.T) {
	for _, tc := range []struct{ h, advanced, want int }{
		{5, 5, 10},  // the second answer came at the next boundary: two periods
		{5, 0, 10},  // the same boundary (consistent steps that follow each other)
		{5, 15, 30}, // a round trip took three periods: six
		{500, 500, 1000},
		{1, 3, 6}, // streaming with H 1: twice the steps a round trip took
	} {
		if got := rebuildLead(tc.h, tc.advanced); got != tc.want {
			t.Errorf("rebuildLead(h %d, advanced %d) = %d, want %d", tc.h, tc.advanced, got, tc.want)
		}
	}
}
