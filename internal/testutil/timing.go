package testutil

import (
	"os"
	"testing"
	"time"
)

// TimingEnv names the environment variable that turns wall-clock bounds into failures.
// Default test runs only log them: on a loaded 2-core machine, or under -race, a bound
// that holds on an idle one fails for reasons that have nothing to do with the code. Run
// them on an otherwise idle machine:
//
//	MESHNODE_TIMING_TESTS=1 go test ./mesh ./node ./consensus ./testnet -run '...' -v
const TimingEnv = "MESHNODE_TIMING_TESTS"

// TimingChecks reports whether wall-clock bounds are checked (TimingEnv is set).
func TimingChecks() bool { return os.Getenv(TimingEnv) != "" }

// Within checks that took is at most limit when TimingChecks is on, and logs the
// measurement either way, so that a default run still shows it.
func Within(t testing.TB, what string, took, limit time.Duration) {
	t.Helper()
	t.Logf("%s took %s (bound %s)", what, took.Round(time.Millisecond), limit)
	if TimingChecks() && took > limit {
		t.Errorf("%s took %s, want ≤ %s", what, took, limit)
	}
}
