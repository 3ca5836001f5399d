//go:build cgo && linux && (amd64 || arm64)

package dynlib

import (
	"runtime"

	"github.com/ebitengine/purego"
)

// Open is purego.Dlopen(path, mode) with its error read on the thread that failed.
func Open(path string, mode int) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlopen(path, mode)
}

// Sym is purego.Dlsym(handle, name) with its error read on the thread that failed.
func Sym(handle uintptr, name string) (uintptr, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return purego.Dlsym(handle, name)
}
