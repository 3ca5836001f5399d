package fsutil

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// SyncDir fsyncs directory dir, so that entries created, renamed or removed in it survive
// a crash of the machine: a file's own fsync makes its contents durable, not its name
// (ext4, xfs and btrfs order the two only partly; POSIX not at all). On Windows, where a
// directory cannot be opened for syncing, it does nothing; a file system that does not
// support syncing directories (EINVAL) is not an error either.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, syscall.EINVAL) {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
