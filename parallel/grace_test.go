package parallel

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// TestGraceWindowShrinksForAMemberLateEveryTime: a member that misses every window halves
// it down to the floor (Grace/8), where it stays, but for one round in every
// graceProbeEvery that waits the whole Grace again.
func TestGraceWindowShrinksForAMemberLateEveryTime(t *testing.T) {
	const grace = 2 * time.Second
	g := newGraceWindow(grace)
	want := []time.Duration{2000, 1000, 500, 250, 250, 250, 250, 250, 2000, 250}
	for round, w := range want {
		if got := g.window(); got != w*time.Millisecond {
			t.Fatalf("round %d: window %v, want %v", round, got, w*time.Millisecond)
		}
		g.observe(0, true)
	}
}

// TestGraceWindowGrowsBackWhenEveryoneComes: rounds every member made double the window
// back up to Grace, and a measured lateness keeps it at twice that at least; a probe that
// finds the member back ends the probing.
func TestGraceWindowGrowsBackWhenEveryoneComes(t *testing.T) {
	const grace = 2 * time.Second
	g := newGraceWindow(grace)
	for range 4 {
		g.observe(0, true) // down to 250 ms
	}
	g.observe(0, false)
	if got := g.window(); got != 500*time.Millisecond {
		t.Fatalf("after one full round: %v, want 500ms", got)
	}
	g.observe(400*time.Millisecond, false) // the last member came 400 ms after the majority
	if got := g.window(); got != time.Second {
		t.Fatalf("after a round with a member 400 ms late: %v, want 1s", got)
	}
	g.observe(0, false)
	if got := g.window(); got != grace {
		t.Fatalf("after another full round: %v, want the whole %v", got, grace)
	}
	for range 3 {
		g.observe(0, true) // 1 s, 500 ms, 250 ms
	}
	g.observe(300*time.Millisecond, false) // lateness measured by a window at its end
	if got := g.window(); got != 600*time.Millisecond {
		t.Fatalf("%v, want twice the measured lateness, 600ms", got)
	}
	// A member late by more than the floor is heard again by a probe, and the window grows.
	g = newGraceWindow(grace)
	for range graceProbeEvery {
		g.observe(0, true)
	}
	if got := g.window(); got != grace {
		t.Fatalf("the probe round waits %v, want %v", got, grace)
	}
	g.observe(time.Second, false) // it came 1 s late
	if got := g.window(); got != grace {
		t.Fatalf("after the member came back within the probe: %v, want %v", got, grace)
	}
}

// TestGraceWindowZeroStaysZero: without a configured window the quorum waits for every
// member, whatever it measures; a changed Grace restarts the adaptation.
func TestGraceWindowZeroStaysZero(t *testing.T) {
	g := newGraceWindow(0)
	g.observe(time.Second, true)
	g.observe(time.Second, false)
	if got := g.window(); got != 0 {
		t.Fatalf("window %v, want 0", got)
	}
	g.configure(time.Second)
	if got := g.window(); got != time.Second {
		t.Fatalf("after configure: %v, want 1s", got)
	}
}

// TestStragglerShrinksTheSurvivorsWindow: replica c reaches three outer steps in a row
// after the grace window; a and b, which waited the whole window for it the first time,
// wait an eighth of it by the fourth, and c still takes their result each time.
func TestStragglerShrinksTheSurvivorsWindow(t *testing.T) {
	cfg, plan := quorumConfig(9, 3, jobspec.SyncDiLoCo)
	cfg.Grace = 80 * time.Millisecond
	run := newRun(t, cfg, plan)
	a, b, c := run.Workers()[0], run.Workers()[1], run.Workers()[2]
	for k := 1; k <= 3; k++ {
		stepWorkers(t, []*Worker{a, b}, 3*k)
		stepWorkers(t, []*Worker{c}, 3*k)
	}
	sameBits(t, "a and the late c", workerParams(a), workerParams(c))
	for _, w := range []*Worker{a, b} {
		if got := w.grace.window(); got != cfg.Grace/graceFloorDiv {
			t.Fatalf("replica %d waits %v at the next outer step, want %v after three missed windows", w.Replica(), got, cfg.Grace/graceFloorDiv)
		}
	}
}
