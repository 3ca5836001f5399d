//go:build linux

package api

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// ProcessStart returns what identifies the process that runs as pid beyond its PID: its
// start time in clock ticks since boot (field 22 of /proc/PID/stat), which differs when
// the PID has been reused. The error wraps os.ErrNotExist when no process runs as pid (a
// zombie counts as gone).
func ProcessStart(pid int) (uint64, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("pid %d: %w", pid, os.ErrNotExist)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces or ')': the fields
	// that follow start after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := bytes.Fields(stat[i+1:]) // fields[0] is field 3, the state
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	if fields[0][0] == 'Z' || fields[0][0] == 'X' {
		return 0, fmt.Errorf("pid %d has exited: %w", pid, os.ErrNotExist)
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64) // field 22
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, nil
}
