//go:build unix

package fingerprint

import "golang.org/x/sys/unix"

// diskFree returns the bytes available to this user in the file system holding dir, or 0
// if it cannot be read.
func diskFree(dir string) uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0
	}
	return uint64(st.Bavail) * uint64(st.Bsize)
}
