package kernels

import (
	"testing"
	"time"
)

// TestSlowdownShowsInMeasuredGemm: a slowdown of 3 makes the measured GEMM speed about a
// third. Speeds are compared as a ratio measured back to back, with a wide margin: on a
// busy machine the scheduler favours a process that sleeps, so its compute runs faster
// than the baseline's and the ratio comes out lower (1.75 was seen at load 10 on 2 cores;
// 3 on a quiet one), but a missing slowdown gives a ratio near 1.
func TestSlowdownShowsInMeasuredGemm(t *testing.T) {
	base := MeasureGemm(256, 256, 256, 1, 200*time.Millisecond)
	SetSlowdown(3)
	slow := MeasureGemm(256, 256, 256, 1, 200*time.Millisecond)
	SetSlowdown(1)
	if Slowdown() != 1 {
		t.Fatal("SetSlowdown(1) must turn the emulation off")
	}
	ratio := base / slow
	t.Logf("GEMM %.1f GFLOP/s, with slowdown 3: %.1f (ratio %.2f)", base, slow, ratio)
	if ratio < 1.5 || ratio > 4.5 {
		t.Fatalf("slowdown 3 changed measured GEMM speed by %.2f×", ratio)
	}
}
