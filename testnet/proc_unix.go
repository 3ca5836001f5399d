//go:build unix && !linux

package testnet

import (
	"os"
	"syscall"
)

func newChildAttr() *syscall.SysProcAttr    { return &syscall.SysProcAttr{Setpgid: true} }
func newDetachedAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// signalGroup signals p's process group (nodes lead their own), falling back to p alone.
func signalGroup(p *os.Process, sig syscall.Signal) {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
	}
}
