//go:build !unix

package blob

// freeBytes cannot tell the free space here: the fetch is not checked in advance.
func freeBytes(string) int64 { return -1 }
