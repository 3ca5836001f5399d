//go:build cgo && linux && (amd64 || arm64) && !nonvml

package fingerprint

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenNVMLAbsentLibrary runs the real dlopen path where the library is not there: a
// clean errNVMLAbsent that detectGPUs turns into no GPU.
func TestOpenNVMLAbsentLibrary(t *testing.T) {
	lib, err := openNVML("libnvidia-ml-meshnode-absent.so.1")
	if lib != nil || !errors.Is(err, errNVMLAbsent) {
		t.Fatalf("got %v, %v; want errNVMLAbsent", lib, err)
	}
}

// TestOpenNVMLLibraryWithoutNVML loads a real library that is not NVML (the C library every
// glibc system has): refused for its missing nvmlInit, not bound half-way.
func TestOpenNVMLLibraryWithoutNVML(t *testing.T) {
	lib, err := openNVML("libc.so.6")
	if errors.Is(err, errNVMLAbsent) {
		t.Skipf("no glibc here: %v", err)
	}
	if lib != nil || err == nil || !strings.Contains(err.Error(), "nvmlInit_v2") {
		t.Fatalf("got %v, %v; want an error naming nvmlInit_v2", lib, err)
	}
}

// TestDetectGPUsOnThisMachine runs detection through the real library: no GPU and no error
// where there is no driver; with MESHNODE_EXPECT_GPU=1 (a machine with an NVIDIA GPU) it
// requires at least one GPU with every detail the profile reports.
func TestDetectGPUsOnThisMachine(t *testing.T) {
	gpus, err := detectGPUs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPUs here: %+v", gpus)
	if os.Getenv("MESHNODE_EXPECT_GPU") != "1" {
		return
	}
	if len(gpus) == 0 {
		t.Fatal("MESHNODE_EXPECT_GPU=1 but NVML reports no GPU")
	}
	for _, g := range gpus {
		if g.Name == "" || !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryTotalBytes == 0 ||
			g.MemoryFreeBytes > g.MemoryTotalBytes || g.Multiprocessors == 0 || g.SMClockMHz == 0 ||
			g.MemoryClockMHz == 0 || g.ComputeCapability == "" {
			t.Errorf("GPU %d lacks details: %+v", g.Index, g)
		}
	}
}

// TestDlopenNVMLBinding loads a stand-in NVML built from testdata/fake_nvml.c and reads
// its two devices through the real run-time binding: arguments, struct layouts, and a name
// that fills its whole buffer without a NUL, read no further than the buffer. It needs a C
// compiler for the stand-in (not for meshnode) and skips, saying so, without one.
func TestDlopenNVMLBinding(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the stand-in NVML library")
	}
	so := filepath.Join(t.TempDir(), "libfake-nvml.so")
	if out, err := exec.Command(cc, "-shared", "-fPIC", "-w", "-o", so, "testdata/fake_nvml.c").CombinedOutput(); err != nil {
		t.Fatalf("build the stand-in library: %v\n%s", err, out)
	}
	lib, err := openNVML(so)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.close()
	gpus, err := gpusFromNVML(lib)
	if err != nil || len(gpus) != 2 {
		t.Fatalf("%+v, %v; want 2 GPUs", gpus, err)
	}
	g := gpus[0]
	if g.Index != 0 || g.Name != "Fake NVIDIA H100 80GB HBM3" || g.UUID != "GPU-00000000-0000-0000-0000-000000000000" ||
		g.MemoryTotalBytes != 85520809984 || g.MemoryFreeBytes != 84935966720 || g.Multiprocessors != 132 ||
		g.SMClockMHz != 1980 || g.MemoryClockMHz != 2619 || g.ComputeCapability != "9.0" {
		t.Errorf("GPU 0 = %+v", g)
	}
	g = gpus[1]
	if g.Name != strings.Repeat("x", nvmlStringBuffer) || g.MemoryFreeBytes != 84935966721 || g.ComputeCapability != "9.1" ||
		!strings.HasSuffix(g.UUID, "01") {
		t.Errorf("GPU 1 = %+v", g)
	}
}
