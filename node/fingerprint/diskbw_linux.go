package fingerprint

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCache asks the kernel to evict the first n bytes of f from the page cache, so that
// reading them back measures the disk.
func dropCache(f *os.File, n int) { _ = unix.Fadvise(int(f.Fd()), 0, int64(n), unix.FADV_DONTNEED) }
