//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"strings"
	"testing"
)

// TestOpenDriverAbsent runs the real dlopen path where the library is not there: a
// clean ErrNoDriver that names the library.
func TestOpenDriverAbsent(t *testing.T) {
	d, err := openDriver("libcuda-meshnode-absent.so.1")
	if d != nil || !errors.Is(err, ErrNoDriver) {
		t.Fatalf("got %v, %v; want ErrNoDriver", d, err)
	}
	if !strings.HasPrefix(err.Error(), "libcuda-meshnode-absent.so.1: not found (no NVIDIA driver)") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("error %q does not say on one line what is missing", err)
	}
}

// TestOpenDriverNotCUDA loads a real library that is not the driver (glibc): refused for
// its missing cuInit, not bound half-way.
func TestOpenDriverNotCUDA(t *testing.T) {
	d, err := openDriver("libc.so.6")
	if errors.Is(err, ErrNoDriver) {
		t.Skipf("no glibc here: %v", err)
	}
	if d != nil || err == nil || !strings.Contains(err.Error(), "no function cuInit") {
		t.Fatalf("got %v, %v; want a missing cuInit", d, err)
	}
}

// TestOpenCublasLtAbsent lists every soname tried.
func TestOpenCublasLtAbsent(t *testing.T) {
	l, err := openCublasLt([]string{"libcublasLt-absent.so.13", "libcublasLt-absent.so.12"})
	if l != nil || !errors.Is(err, errNoCublasLt) || !strings.Contains(err.Error(), "libcublasLt-absent.so.13, libcublasLt-absent.so.12 not found") {
		t.Fatalf("got %v, %v", l, err)
	}
	l, err = openCublasLt([]string{"libc.so.6"})
	if l != nil || err == nil || !strings.Contains(err.Error(), "no function cublasLtCreate") {
		t.Fatalf("libc as cuBLASLt: got %v, %v", l, err)
	}
}

// TestOpenSaysWhatIsMissing: where Open fails, its error is one line naming the cause;
// where it succeeds (a GPU machine), the backend describes its device.
func TestOpenSaysWhatIsMissing(t *testing.T) {
	b, err := Open(DefaultConfig())
	if err != nil {
		if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "libcuda.so.1") && !strings.Contains(err.Error(), "cuda:") {
			t.Fatalf("Open's error %q is not one line naming what is missing", err)
		}
		t.Logf("no CUDA here, as Open says: %v", err)
		return
	}
	defer b.Close()
	if !strings.HasPrefix(b.Name(), "cuda/") || b.Describe() == "" {
		t.Fatalf("name %q, describe %q", b.Name(), b.Describe())
	}
}
