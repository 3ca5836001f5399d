package fingerprint

import (
	"io"
	"os"
	"time"
)

// diskProbeBytes is the most the disk measurement writes and reads back: large enough to
// leave the drive's own cache behind on most disks, small enough to take well under a
// second on an SSD.
const diskProbeBytes = 32 << 20

// diskProbeChunk is the size of each write and read.
const diskProbeChunk = 1 << 20

// measureDisk measures the sequential write and read bandwidth of dir in bytes/s: it writes
// up to diskProbeBytes to a temporary file in chunks for at most limit, syncs it (the sync
// is timed with the writes), asks the kernel to drop the file from the page cache
// (dropCache, posix_fadvise DONTNEED on Linux, so the read is not served from memory), reads
// it back for at most limit, and removes it. Either rate is 0 when it could not be measured
// (the balancer then assumes its conservative default).
func measureDisk(dir string, limit time.Duration) (read, write float64) {
	f, err := os.CreateTemp(dir, ".disk-probe-*")
	if err != nil {
		return 0, 0
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, diskProbeChunk)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8) // not all zeros: some file systems compress or skip them
	}
	start := time.Now()
	written := 0
	for written < diskProbeBytes && time.Since(start) < limit {
		n, err := f.Write(buf)
		written += n
		if err != nil {
			return 0, 0
		}
	}
	if err := f.Sync(); err != nil || written == 0 {
		return 0, 0
	}
	write = float64(written) / time.Since(start).Seconds()
	dropCache(f, written)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, write
	}
	start, got := time.Now(), 0
	for got < written && time.Since(start) < limit {
		n, err := f.Read(buf)
		got += n
		if err != nil {
			break
		}
	}
	if got == 0 {
		return 0, write
	}
	return float64(got) / time.Since(start).Seconds(), write
}
