package node

import (
	"runtime"
	"sync"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/node/fingerprint"
	"github.com/meshnode/meshnode/scheduler"
)

// The host load: how much of its cores other programs leave a node that computes now.
// A profile is normalised to the machine having nothing else to do (node/fingerprint), so
// a first plan on a host that other programs keep busy was predicted several times too
// fast until its steps were measured (docs/balancer.md, "Calibration and stragglers").
// The planning node measures its own host's load when it is about to plan a job and
// prices it on every member of that host (scheduler.Profile.HostLoad); members on other
// hosts, which it cannot measure, are priced without one until their steps are measured.

const (
	// hostLoadProbe is how long the probe keeps every core busy.
	hostLoadProbe = 200 * time.Millisecond
	// hostLoadMaxAge is how long a measurement is used for the plans that follow it.
	hostLoadMaxAge = 10 * time.Second
)

// hostLoadMeter measures the host's load on demand and keeps it for hostLoadMaxAge.
type hostLoadMeter struct {
	mu   sync.Mutex
	load float64
	at   time.Time
	// measure is the probe (measureHostLoad); tests replace it.
	measure func() float64
}

// current is the host's load in cores, measured now unless a measurement younger than
// hostLoadMaxAge exists.
func (m *hostLoadMeter) current(now time.Time) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.IsZero() || now.Sub(m.at) > hostLoadMaxAge {
		measure := m.measure
		if measure == nil {
			measure = measureHostLoad
		}
		m.load, m.at = measure(), now
	}
	return m.load
}

// measureHostLoad keeps as many goroutines busy as the process may run at once for
// hostLoadProbe and returns the load that explains the CPU time they got: with a share s
// of the cores, 1/s − 1 cores' worth of other work (balancer.Node.HostLoad); 0 where
// the process's CPU time cannot be read or every core was had.
func measureHostLoad() float64 {
	threads := runtime.GOMAXPROCS(0)
	cpu0, wall0 := fingerprint.ProcessCPUTime(), time.Now()
	if cpu0 <= 0 {
		return 0
	}
	var wg sync.WaitGroup
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fingerprint.Spin(wall0.Add(hostLoadProbe))
		}()
	}
	wg.Wait()
	return loadFromShare(fingerprint.ProcessCPUTime()-cpu0, time.Since(wall0), threads)
}

// loadFromShare is the host load (cores of other work) that leaves threads busy threads
// cpu of CPU time in wall: 1/share − 1, share = cpu/(wall·threads) capped at 1; 0 without
// a measurement.
func loadFromShare(cpu, wall time.Duration, threads int) float64 {
	if cpu <= 0 || wall <= 0 || threads < 1 {
		return 0
	}
	share := min(1, float64(cpu)/(float64(wall)*float64(threads)))
	return 1/share - 1
}

// firstPlanPending reports whether a job of jobs is waiting for its first plan.
func firstPlanPending(jobs []scheduler.Job) bool {
	for _, j := range jobs {
		if j.Status == jobspec.JobSubmitted || j.Status == jobspec.JobPlanning {
			return true
		}
	}
	return false
}

// withHostLoad sets load on the members that announce host (non-empty), copying their
// profiles.
func withHostLoad(members []scheduler.Member, host string, load float64) {
	if host == "" || !(load > 0) {
		return
	}
	for i, m := range members {
		if m.Profile != nil && m.Profile.Host == host {
			p := *m.Profile
			p.HostLoad = load
			members[i].Profile = &p
		}
	}
}
