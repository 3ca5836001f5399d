package node

import (
	"math"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// The host load is what explains the CPU time a probe got: half of the cores is one
// core's worth of other work per core, a quarter three, every core none; nothing measured
// is no load.
func TestLoadFromShare(t *testing.T) {
	for _, tc := range []struct {
		cpu, wall time.Duration
		threads   int
		want      float64
	}{
		{200 * time.Millisecond, 200 * time.Millisecond, 2, 1},
		{100 * time.Millisecond, 200 * time.Millisecond, 2, 3},
		{400 * time.Millisecond, 200 * time.Millisecond, 2, 0},
		{500 * time.Millisecond, 200 * time.Millisecond, 2, 0}, // other goroutines' CPU time: capped
		{0, 200 * time.Millisecond, 2, 0},
		{100 * time.Millisecond, 0, 2, 0},
	} {
		if got := loadFromShare(tc.cpu, tc.wall, tc.threads); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("cpu %v in %v on %d threads: load %g, want %g", tc.cpu, tc.wall, tc.threads, got, tc.want)
		}
	}
}

// Only the members of the planning node's host get its load, on copies of their profiles;
// a measurement is reused while it is young and repeated once it is old.
func TestHostLoadGoesToTheHostsMembers(t *testing.T) {
	shared := &scheduler.Profile{GFLOPS: 10, Host: "h"}
	ms := []scheduler.Member{{ID: "a", Profile: shared}, {ID: "b", Profile: &scheduler.Profile{GFLOPS: 10, Host: "other"}},
		{ID: "c", Profile: &scheduler.Profile{GFLOPS: 10}}, {ID: "d"}}
	withHostLoad(ms, "h", 2.5)
	if ms[0].Profile.HostLoad != 2.5 || ms[1].Profile.HostLoad != 0 || ms[2].Profile.HostLoad != 0 {
		t.Errorf("host loads %g %g %g, want 2.5 on h's member only", ms[0].Profile.HostLoad, ms[1].Profile.HostLoad, ms[2].Profile.HostLoad)
	}
	if shared.HostLoad != 0 {
		t.Error("the member's own profile was modified")
	}
	calls := 0
	m := hostLoadMeter{measure: func() float64 { calls++; return float64(calls) }}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if a, b := m.current(t0), m.current(t0.Add(hostLoadMaxAge/2)); a != 1 || b != 1 {
		t.Errorf("loads %g, %g within the max age: want one measurement, 1", a, b)
	}
	if c := m.current(t0.Add(2 * hostLoadMaxAge)); c != 2 {
		t.Errorf("load %g after the max age, want a new measurement", c)
	}
	if firstPlanPending([]scheduler.Job{{Status: jobspec.JobRunning}}) || !firstPlanPending([]scheduler.Job{{Status: jobspec.JobRunning}, {Status: jobspec.JobSubmitted}}) {
		t.Error("a first plan is pending exactly when a job is submitted or planning")
	}
}
