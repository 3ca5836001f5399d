package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"
)

// keepMemoryLimit restores the test binary's Go memory limit when the test ends, and
// unsets GOMEMLIMIT for the test, as a user who did not set it.
func keepMemoryLimit(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	os.Unsetenv("GOMEMLIMIT")
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

func TestMemoryLimitFor(t *testing.T) {
	const MiB = 1 << 20
	for budget, want := range map[uint64]int64{
		1 * MiB:        257 * MiB, // the least headroom: 256 MiB
		480 * MiB:      736 * MiB,
		1024 * MiB:     1280 * MiB,
		8192 * MiB:     10240 * MiB, // a quarter more
		math.MaxUint64: math.MaxInt64,
	} {
		if got := memoryLimitFor(budget); got != want {
			t.Errorf("memoryLimitFor(%d) = %d, want %d", budget, got, want)
		}
	}
}

// TestApplyMemoryLimit: a budget sets the runtime's soft limit with its headroom, unless the
// user set GOMEMLIMIT or there is no budget.
func TestApplyMemoryLimit(t *testing.T) {
	keepMemoryLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	if got := applyMemoryLimit(0); got != 0 || debug.SetMemoryLimit(-1) != math.MaxInt64 {
		t.Fatalf("no budget: set %d, limit now %d", got, debug.SetMemoryLimit(-1))
	}
	want := memoryLimitFor(480 << 20)
	if got := applyMemoryLimit(480 << 20); got != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("budget 480 MiB: set %d, limit now %d; want %d", got, debug.SetMemoryLimit(-1), want)
	}
	debug.SetMemoryLimit(3 << 30)
	t.Setenv("GOMEMLIMIT", "3GiB")
	if got := applyMemoryLimit(480 << 20); got != 0 || debug.SetMemoryLimit(-1) != 3<<30 {
		t.Fatalf("with GOMEMLIMIT set: set %d, limit now %d; want the user's 3 GiB kept", got, debug.SetMemoryLimit(-1))
	}
}

// TestTrainSetsMemoryLimit: `train --memory-budget B --stages 2` runs under the limit of
// 2·B (the budget is per stage).
func TestTrainSetsMemoryLimit(t *testing.T) {
	keepMemoryLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	args := smallTrain(corpus(t), "--steps", "2", "--memory-budget", "256KiB", "--data-dir", t.TempDir(), "--stages", "2")
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got, want := debug.SetMemoryLimit(-1), memoryLimitFor(2*256<<10); got != want {
		t.Fatalf("Go memory limit %d after train, want %d", got, want)
	}
}

// TestJoinSetsMemoryLimit: a node started with --memory-budget runs under the limit of its
// budget.
func TestJoinSetsMemoryLimit(t *testing.T) {
	keepMemoryLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args := []string{"join", "--data-dir", filepath.Join(t.TempDir(), "n"), "--join-secret", "0123456789abcdefgh",
		"--mdns=false", "--dht=false", "--nat=false", "--log-level", "error", "--listen", "/ip4/127.0.0.1/tcp/0",
		"--api", "127.0.0.1:0", "--data-listen", "127.0.0.1:0", "--gemm-shape", "512x256x256", "--profile-batch", "50ms",
		"--memory-budget", "64MiB"}
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer
	go func() { done <- run(ctx, args, &stdout, &stderr) }()
	want := memoryLimitFor(64 << 20)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for debug.SetMemoryLimit(-1) != want {
		select {
		case code := <-done:
			t.Fatalf("join exited %d before the limit was set: %s", code, stderr.String())
		case <-ctx.Done():
			t.Fatalf("Go memory limit %d, want %d", debug.SetMemoryLimit(-1), want)
		case <-tick.C:
		}
	}
	cancel()
	<-done
}
