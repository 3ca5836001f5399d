//go:build unix

package offload

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapBuffers maps n bytes of anonymous, page-aligned memory outside the Go heap: the
// resident chunk buffers, allocated once (their pages count in RSS once touched).
func mapBuffers(n int64) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes of chunk buffers: %w", n, err)
	}
	return b, nil
}

func unmapBuffers(b []byte) error { return unix.Munmap(b) }
