//go:build !unix

package fingerprint

// diskFree is not measured on this platform.
func diskFree(string) uint64 { return 0 }
