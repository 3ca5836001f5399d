//go:build linux

package kernels

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPUTime is the CPU time all of this process's threads have used, to the
// nanosecond (clock_gettime(CLOCK_PROCESS_CPUTIME_ID); getrusage rounds to microseconds),
// or −1 if the clock cannot be read.
func processCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}
