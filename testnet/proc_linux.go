//go:build linux

package testnet

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
)

// childAttr puts a node in its own process group (a terminal's Ctrl-C reaches only the
// testnet's owner, which shuts the nodes down in order) and kills it if its owner dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// detachedAttr starts a process in its own session, detached from the terminal.
func detachedAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true}
}

// processAlive reports whether pid runs (a zombie does not count) and its command line
// contains mark, so that a PID reused by an unrelated process is never taken for ours.
func processAlive(pid int, mark string) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	if mark == "" {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && bytes.Contains(cmdline, []byte(mark))
}

// signalGroup signals p's process group (nodes lead their own), falling back to p alone.
func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}
