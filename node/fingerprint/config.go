package fingerprint

import (
	"errors"
	"fmt"
	"time"
)

// Config says what a Profiler measures and with which settings.
type Config struct {
	// Compute configures the GEMM and training-step measurements.
	Compute ComputeConfig
	// DataDir is the directory whose disk is measured (free space, bandwidth).
	DataDir string
	// MemoryBudget is the memory the node offers to training; 0 means
	// MemoryBudgetFraction of the available memory at each measurement.
	MemoryBudget uint64
	// MemoryBudgetFraction is the share of available memory offered when MemoryBudget
	// is 0; 0 means 0.8.
	MemoryBudgetFraction float64
	// Version is the meshnode release the profile announces.
	Version string
	// HostLabel, when set, names the machine in place of its machine and boot ids: nodes
	// with different labels are priced as separate machines, nodes with the same label as
	// sharing one machine's cores (network namespaces or containers given their own cores
	// on one machine; in-process test nodes).
	HostLabel string
}

// ComputeConfig configures the GEMM measurement of the device profile.
type ComputeConfig struct {
	// GemmM, GemmN and GemmK give the measured shape C(M×N) = A(M×K)·B(K×N): M tokens
	// through a d_model×d_model linear layer. Zero means 2048×512×512.
	GemmM, GemmN, GemmK int
	// BatchDuration is the minimum length of each of the three timed batches (the
	// median is kept). Zero means 300 ms, about one second of work in all.
	BatchDuration time.Duration
	// Threads is the number of goroutines the GEMM may use. Zero means kernels.Threads().
	Threads int
	// Slowdown is the emulated device's slowdown (a testnet's --slowdown): the profile
	// reports the rates of a device this much slower. The kernels' emulation of it
	// (kernels.SetSlowdown) is process-wide and set by the process (meshnode join), not by
	// the profiler. Zero means 1 (no slowdown); it must be ≥ 1 otherwise.
	Slowdown float64
}

// Validate reports the first problem with c in words a user can act on.
func (c ComputeConfig) Validate() error {
	if c.GemmM < 0 || c.GemmN < 0 || c.GemmK < 0 {
		return fmt.Errorf("GEMM shape %dx%dx%d: sizes must be ≥ 0", c.GemmM, c.GemmN, c.GemmK)
	}
	if c.BatchDuration < 0 || c.Threads < 0 {
		return errors.New("profile batch duration and threads must be ≥ 0")
	}
	if c.Slowdown != 0 && !(c.Slowdown >= 1) {
		return fmt.Errorf("slowdown must be ≥ 1 (got %v)", c.Slowdown)
	}
	return nil
}

func (c ComputeConfig) shape() (m, n, k int) {
	m, n, k = c.GemmM, c.GemmN, c.GemmK
	if m == 0 {
		m = 2048
	}
	if n == 0 {
		n = 512
	}
	if k == 0 {
		k = 512
	}
	return m, n, k
}

func (c ComputeConfig) batchDuration() time.Duration {
	if c.BatchDuration == 0 {
		return 300 * time.Millisecond
	}
	return c.BatchDuration
}

func (c ComputeConfig) slowdown() float64 {
	if c.Slowdown == 0 {
		return 1
	}
	return c.Slowdown
}
