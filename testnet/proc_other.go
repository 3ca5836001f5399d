//go:build !linux

package testnet

import (
	"os"
	"syscall"
)

// childAttr puts a node in its own process group where the platform has them.
func childAttr() *syscall.SysProcAttr { return newChildAttr() }

// detachedAttr starts a process detached from the terminal where the platform allows.
func detachedAttr() *syscall.SysProcAttr { return newDetachedAttr() }

// processAlive reports whether pid runs; mark is not checked on this platform.
func processAlive(pid int, _ string) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}
