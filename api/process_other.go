//go:build !unix

package api

import (
	"fmt"
	"os"
)

// ProcessStart reports whether a process runs as pid, as far as os.FindProcess can tell
// here; it returns 0 as its start time, so a reused PID is not detected. The error wraps
// os.ErrNotExist when no process runs as pid.
func ProcessStart(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	_ = p.Release()
	return 0, nil
}
