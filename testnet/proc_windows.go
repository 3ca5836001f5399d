//go:build windows

package testnet

import (
	"os"
	"syscall"
)

func newChildAttr() *syscall.SysProcAttr    { return nil }
func newDetachedAttr() *syscall.SysProcAttr { return nil }

// signalGroup signals p (Windows has no process groups to signal; any signal kills).
func signalGroup(p *os.Process, sig syscall.Signal) { _ = p.Signal(sig) }
