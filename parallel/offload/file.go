package offload

import (
	"errors"
	"fmt"
	"os"
	"unsafe"
)

// Align is the alignment of chunk sizes, file offsets and buffers: direct I/O needs
// them aligned to the device's logical block, which is at most a page.
const Align = 4096

// createFile creates the backing file in dir and unlinks it at once, so that nothing is
// left behind however the process ends. It bypasses the page cache where the file system
// allows (direct I/O) and says whether it does.
func createFile(dir string) (*os.File, bool, error) {
	if dir == "" {
		return nil, false, errors.New("no directory for the offload file")
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, false, err
	} else if !st.IsDir() {
		return nil, false, fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, "offload-*.chunks")
	if err != nil {
		return nil, false, err
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, false, err
	}
	direct := setDirect(f) == nil
	return f, direct, nil
}

// floats views the first n floats of b.
func floats(b []byte, n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

// bytesOf views x as bytes.
func bytesOf(x []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
}
