//go:build !linux

package fingerprint

import "github.com/pbnjay/memory"

// systemMemory reports total and free memory as the operating system counts them.
func systemMemory() (total, available uint64) {
	return memory.TotalMemory(), memory.FreeMemory()
}
