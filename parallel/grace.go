package parallel

import (
	"sync"
	"time"
)

// A replica that is late at every outer step (slower than its plan priced it, or behind a
// slow link) costs the others the whole grace window each time: they wait Grace for it,
// then go on without it. graceWindow adapts the window an outer step waits from what the
// presence phase measures (quorum.go): a window that ended with an active member still
// missing halves, down to a floor (Grace/graceFloorDiv); a round that every active
// member made doubles it back, up to Grace, and never leaves it below twice the lateness it
// measured (how long after the majority the last member came). A member late by more than
// the floor stays out while the window is small, so after graceProbeEvery missed rounds in
// a row the next round waits the whole Grace again: if the member is back within it, the
// window grows back from there. Members need not agree on their windows: phase 2 computes
// the quorum from the sets each member held.

// graceFloorDiv bounds how far the window shrinks: Grace/graceFloorDiv.
const graceFloorDiv = 8

// graceProbeEvery is how many missed rounds in a row pass before one waits the whole Grace.
const graceProbeEvery = 8

// graceWindow is a worker's adaptive grace window, shared by its outer steps' quorums.
type graceWindow struct {
	mu     sync.Mutex
	max    time.Duration // the configured Grace; 0: no window (wait for every member)
	cur    time.Duration
	missed int // rounds in a row whose window ended with a member missing
}

func newGraceWindow(grace time.Duration) *graceWindow {
	return &graceWindow{max: grace, cur: grace}
}

// configure restarts the adaptation when the configured Grace changed (a test, or a
// worker's config edited between outer steps): the window is the new Grace again.
func (g *graceWindow) configure(grace time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if grace != g.max {
		g.max, g.cur, g.missed = grace, grace, 0
	}
}

// window is how long the next presence phase waits once a majority is in.
func (g *graceWindow) window() time.Duration {
	if g == nil {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.missed > 0 && g.missed%graceProbeEvery == 0 {
		return g.max // a probe: is the member that keeps missing back within the whole Grace?
	}
	return g.cur
}

// observe records a presence phase that waited its window: late is how long after the
// majority was in the last active member arrived (0 when none came after it); missed says
// whether the window ended with an active member still absent.
func (g *graceWindow) observe(late time.Duration, missed bool) {
	if g == nil || g.max <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if missed {
		g.missed++
		g.cur = max(g.cur/2, g.max/graceFloorDiv)
		return
	}
	g.missed = 0
	g.cur = min(g.max, max(2*g.cur, 2*late))
}
