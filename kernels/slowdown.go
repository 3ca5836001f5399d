package kernels

import (
	"math"
	"sync/atomic"
	"time"
)

// Slowdown emulation makes this process's kernels run as if on a device factor× slower:
// after each top-level kernel call (one through ParallelFor or a serial GEMM) the calling
// goroutine owes (factor−1)× the call's time, and sleeps the debt off once it exceeds
// slowdownQuantum, so short calls do not pay timer overhead each. Sleeping, rather than
// spinning, leaves the CPU to the other nodes of a local testnet. The device profile's
// GEMM measurement sees the same slowdown, so the balancer plans with it.

// slowdownQuantum is the debt that triggers a sleep.
const slowdownQuantum = 5 * time.Millisecond

var (
	slowdownBits atomic.Uint64 // math.Float64bits of the factor; 0 means 1
	slowdownDebt atomic.Int64  // nanoseconds owed
	// slowdownSleep sleeps for d and returns how long it really slept (tests count).
	slowdownSleep = func(d time.Duration) time.Duration {
		t0 := time.Now()
		time.Sleep(d)
		return time.Since(t0)
	}
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

// slowdownStart returns the time a kernel call starts, or the zero time when no slowdown
// is set (then slowdownEnd is free).
func slowdownStart() time.Time {
	if slowdownBits.Load() == 0 {
		return time.Time{}
	}
	return time.Now()
}

// slowdownEnd charges the call that began at start and sleeps off the debt when due. The
// debt is reserved before sleeping and the sleep's overshoot (timer slack, a busy
// machine's wake-up latency) is credited back, so over many calls the emulated time is
// exact even though single sleeps are not.
func slowdownEnd(start time.Time) {
	if start.IsZero() {
		return
	}
	owed := slowdownDebt.Add(int64((Slowdown() - 1) * float64(time.Since(start))))
	if owed < int64(slowdownQuantum) || !slowdownDebt.CompareAndSwap(owed, 0) {
		return
	}
	slowdownDebt.Add(owed - int64(slowdownSleep(time.Duration(owed))))
}
