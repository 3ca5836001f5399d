package kernels

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestSlowdownSleepsFactorMinusOneTimesTheWork: with a slowdown of 3, kernels sleep twice
// the time they computed (less at most one quantum still owed). Sleep is counted, not
// taken, so the check does not depend on how busy the machine is.
func TestSlowdownSleepsFactorMinusOneTimesTheWork(t *testing.T) {
	var slept atomic.Int64
	orig := slowdownSleep
	slowdownSleep = func(d time.Duration) time.Duration { slept.Add(int64(d)); return d }
	defer func() { slowdownSleep = orig; SetSlowdown(1); slowdownDebt.Store(0) }()
	slowdownDebt.Store(0)

	a, c := make([]float32, 256*256), make([]float32, 256*256)
	SetSlowdown(3)
	var work time.Duration
	for range 60 {
		t0 := time.Now()
		Gemm(false, false, 256, 256, 256, 1, a, 256, a, 256, 0, c, 256)
		work += time.Since(t0)
	}
	SetSlowdown(1)
	owed := time.Duration(slowdownDebt.Load())
	got, want := time.Duration(slept.Load())+owed, 2*work
	t.Logf("computed %s, slept %s, still owed %s", work, time.Duration(slept.Load()), owed)
	if got < want*9/10 || got > want*11/10 {
		t.Fatalf("slept+owed %s for %s of work at slowdown 3, want about %s", got, work, want)
	}
	if Slowdown() != 1 {
		t.Fatal("SetSlowdown(1) must turn the emulation off")
	}
}
