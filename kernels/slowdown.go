package kernels

import (
	"math"
	"sync/atomic"
	"time"
)

// Slowdown emulation makes this process's kernels run as if on a device factor× slower:
// after each top-level kernel call (one through ParallelFor or a serial GEMM) the calling
// goroutine owes (factor−1)× the time the call would have taken with its cores to itself,
// and sleeps the debt off once it exceeds slowdownQuantum, so short calls do not pay timer
// overhead each. Sleeping, rather than spinning, leaves the CPU to the other nodes of a
// local testnet. The device profile's measurements see the same slowdown, so the balancer
// plans with it.
//
// The uncontended time is the CPU time the process used during the call over the
// goroutines the call ran on, capped by the call's wall time. Charging the wall time
// instead made a slowed node pay factor× the contention of the programs beside it: a
// slowdown-3 node whose passes ran 1.25× slower beside a busy node took 3.75× their
// uncontended time where a device 3× slower takes 3× plus the same 0.25×, and the plan,
// whose profile the contention did not stretch the same way, priced it 1.2–1.6× too fast.

// slowdownQuantum is the debt that triggers a sleep.
const slowdownQuantum = 5 * time.Millisecond

var (
	slowdownBits atomic.Uint64 // math.Float64bits of the factor; 0 means 1
	slowdownDebt atomic.Int64  // nanoseconds owed
	// slowdownSlept is the nanoseconds the emulation's sleeps took in all, for SlowdownSlept.
	slowdownSlept atomic.Int64
	// slowdownSleep sleeps for d and returns how long it really slept (tests count).
	slowdownSleep = func(d time.Duration) time.Duration {
		t0 := time.Now()
		time.Sleep(d)
		return time.Since(t0)
	}
	// slowdownNow is the wall clock and slowdownCPU the process's CPU time, negative
	// where the platform does not report it (then calls are charged their wall time);
	// tests replace both.
	slowdownNow = time.Now
	slowdownCPU = processCPUTime
)

// SetSlowdown makes kernels take factor× their time (factor ≥ 1; 1 or less turns the
// emulation off). The testnet uses it to emulate unequal devices on one machine.
func SetSlowdown(factor float64) {
	if !(factor > 1) || math.IsInf(factor, 0) {
		slowdownBits.Store(0)
		return
	}
	slowdownBits.Store(math.Float64bits(factor))
}

// Slowdown reports the emulated slowdown factor (1 when off).
func Slowdown() float64 {
	if b := slowdownBits.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// SlowdownSlept is how long this process's kernels have slept for the emulation in all. A
// profile that times kernels under contention scales only the rest of their time by the
// cores other programs left it: the sleeps are the emulated device's, and they take as
// long on a busy machine as on an idle one (node/fingerprint).
func SlowdownSlept() time.Duration { return time.Duration(slowdownSlept.Load()) }

// slowdownMark is when a kernel call started, on the wall clock and in the process's CPU
// time; the zero mark means no slowdown is set (then slowdownEnd is free).
type slowdownMark struct {
	wall time.Time
	cpu  time.Duration
}

// slowdownStart marks the start of a kernel call; it reads no clock when no slowdown is set.
func slowdownStart() slowdownMark {
	if slowdownBits.Load() == 0 {
		return slowdownMark{}
	}
	return slowdownMark{wall: slowdownNow(), cpu: slowdownCPU()}
}

// slowdownEnd charges the call that began at start and ran on parts goroutines, and sleeps
// off the debt when due. The debt is reserved before sleeping and the sleep's overshoot
// (timer slack, a busy machine's wake-up latency) is credited back, so over many calls the
// emulated time is exact even though single sleeps are not.
func slowdownEnd(start slowdownMark, parts int) {
	if start.wall.IsZero() {
		return
	}
	work := slowdownWork(slowdownNow().Sub(start.wall), slowdownCPU()-start.cpu, start.cpu >= 0, parts)
	owed := slowdownDebt.Add(int64((Slowdown() - 1) * float64(work)))
	if owed < int64(slowdownQuantum) || !slowdownDebt.CompareAndSwap(owed, 0) {
		return
	}
	slept := int64(slowdownSleep(time.Duration(owed)))
	slowdownSlept.Add(slept)
	slowdownDebt.Add(owed - slept)
}

// slowdownWork is how long a call of wall time wall, which used cpu of the process's CPU
// time over parts goroutines, would have taken with a core for each goroutine: cpu/parts.
// It is capped by wall, because the process's other goroutines (the network, the garbage
// collector) count in cpu too; without a CPU clock (cpuKnown false) it is wall.
func slowdownWork(wall, cpu time.Duration, cpuKnown bool, parts int) time.Duration {
	if !cpuKnown || cpu < 0 {
		return wall
	}
	return min(wall, cpu/time.Duration(max(parts, 1)))
}
