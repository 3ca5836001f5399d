//go:build !linux

package kernels

import "time"

// processCPUTime is unknown here: −1 makes the slowdown emulation charge each kernel
// call its wall time, contention included.
func processCPUTime() time.Duration { return -1 }
