//go:build unix

package main

import "golang.org/x/sys/unix"

// canWriteDir reports whether this process may create files in the directory p.
func canWriteDir(p string) error { return unix.Access(p, unix.W_OK|unix.X_OK) }
