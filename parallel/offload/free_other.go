//go:build !unix

package offload

// FreeBytes cannot tell the free space here: the store is not checked in advance.
func FreeBytes(string) int64 { return -1 }
