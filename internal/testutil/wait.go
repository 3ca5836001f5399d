package testutil

import (
	"testing"
	"time"
)

// pollInterval is how often WaitFor and WaitForErr re-check their condition.
const pollInterval = 20 * time.Millisecond

// WaitFor polls cond until it returns true, failing the test with what it waited for once
// timeout has passed. The timeout is a bound on a hang, not a performance assertion: pick it
// generous enough for a loaded 2-core machine under -race.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	WaitForErr(t, timeout, func() error {
		if cond() {
			return nil
		}
		return errNotYet(what)
	})
}

// WaitForErr polls cond until it returns nil, failing the test with the last error once
// timeout has passed.
func WaitForErr(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: %v", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

type errNotYet string

func (e errNotYet) Error() string { return "waiting for " + string(e) }
