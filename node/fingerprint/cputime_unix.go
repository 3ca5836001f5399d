//go:build unix

package fingerprint

import (
	"syscall"
	"time"
)

// ProcessCPUTime is the user plus system CPU time this process has used (the profile
// normalises its rates by it; the node measures its host's load with it).
func ProcessCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
