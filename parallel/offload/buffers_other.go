//go:build !unix

package offload

import "unsafe"

// mapBuffers allocates n bytes aligned to Align from the Go heap where no mmap exists
// (Windows and other non-Unix systems): the engine needs the alignment for direct I/O,
// not the memory's place outside the heap.
func mapBuffers(n int64) ([]byte, error) {
	b := make([]byte, n+Align)
	off := int((Align - uintptr(unsafe.Pointer(&b[0]))%Align) % Align)
	return b[off : off+int(n) : off+int(n)], nil
}

func unmapBuffers([]byte) error { return nil }
