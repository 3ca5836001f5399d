//go:build unix

package offload

import "syscall"

// FreeBytes is the space available to this process in dir's file system, or -1 when it
// cannot be told.
func FreeBytes(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize) // the fields' types differ by platform
}
