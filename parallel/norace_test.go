//go:build !race

package parallel

import "testing"

// skipUnderRace does nothing without the race detector (race_test.go).
func skipUnderRace(*testing.T) {}
