package testutil

import (
	"errors"
	"testing"
	"time"
)

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	WaitFor(t, time.Minute, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

// fakeTB records Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}
func (f *fakeTB) Errorf(format string, args ...any) { f.failed = format }
func (f *fakeTB) Logf(string, ...any)               {}

func TestWaitForErrFailsWithTheLastError(t *testing.T) {
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				t.Fatalf("recovered %v, want the fake's Fatalf", r)
			}
		}()
		WaitForErr(f, 0, func() error { return errors.New("never") })
	}()
	if f.failed == "" {
		t.Fatal("WaitForErr did not fail after its timeout")
	}
}

func TestWithinFailsOnlyWhenTimingChecksAreOn(t *testing.T) {
	t.Setenv(TimingEnv, "")
	f := &fakeTB{TB: t}
	Within(f, "a step", 2*time.Second, time.Second)
	if f.failed != "" {
		t.Fatalf("failed without %s: %s", TimingEnv, f.failed)
	}
	t.Setenv(TimingEnv, "1")
	Within(f, "a step", 2*time.Second, time.Second)
	if f.failed == "" {
		t.Fatalf("a bound exceeded with %s=1 did not fail", TimingEnv)
	}
	f.failed = ""
	Within(f, "a step", time.Second/2, time.Second)
	if f.failed != "" {
		t.Fatalf("a bound met failed: %s", f.failed)
	}
}
