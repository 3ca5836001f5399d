//go:build unix && !linux

package api

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ProcessStart reports whether a process runs as pid; it returns 0 as its start time,
// which this system does not offer cheaply, so a reused PID is not detected. The error
// wraps os.ErrNotExist when no process runs as pid.
func ProcessStart(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	err := syscall.Kill(pid, 0)
	if err == nil || errors.Is(err, syscall.EPERM) { // EPERM: it runs, as another user
		return 0, nil
	}
	return 0, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
}
