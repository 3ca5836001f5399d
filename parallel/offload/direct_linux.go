package offload

import (
	"os"

	"golang.org/x/sys/unix"
)

// setDirect turns on O_DIRECT for f, then probes it with one aligned write and read (file
// systems such as tmpfs refuse it, some only at the first I/O); on failure f stays as it
// was, going through the page cache.
func setDirect(f *os.File) error {
	fd := int(f.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags|unix.O_DIRECT); err != nil {
		return err
	}
	probe, err := mapBuffers(Align)
	if err == nil {
		defer unmapBuffers(probe)
		if _, err = f.WriteAt(probe, 0); err == nil {
			_, err = f.ReadAt(probe, 0)
		}
	}
	if err != nil {
		_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags)
		return err
	}
	return f.Truncate(0)
}
