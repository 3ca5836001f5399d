//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ebitengine/purego"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/devicetest"
)

// fakeDriver compiles testdata/fakecuda.c (host memory as device memory, a few kernels in
// C) into a library, points Open at it for the test, and returns the functions that count
// what it saw. Without a C compiler the test is skipped.
func fakeDriver(t *testing.T) (launches func(string) int64, frees func() int64) {
	return buildFake(t, false)
}

// buildFake is fakeDriver; with emulate, the library also holds the kernels' own CUDA C
// source compiled for the host (testdata/emukernels.cc), which its cuLaunchKernel runs.
func buildFake(t *testing.T, emulate bool) (launches func(string) int64, frees func() int64) {
	t.Helper()
	cc, cxx := compiler(t, "gcc", "cc"), ""
	if emulate {
		cxx = compiler(t, "g++", "c++")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libfakecuda.so")
	args := []string{"-fPIC", "-O1", "-c", "-o", filepath.Join(dir, "fake.o"), "testdata/fakecuda.c"}
	if inc := filepath.Join(os.Getenv("CUDA_HOME"), "include"); fileExists(filepath.Join(inc, "cuda.h")) {
		// Against the real header, every fake function must have the driver's prototype.
		args = append(args, "-DFAKECUDA_REAL_HEADER", "-I"+inc)
		t.Logf("fake driver checked against %s", filepath.Join(inc, "cuda.h"))
	}
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run(cc, args...)
	objs := []string{filepath.Join(dir, "fake.o")}
	link := cc
	if emulate {
		run(cxx, "-std=c++20", "-fPIC", "-O2", "-DMESHNODE_EMULATE", "-Itestdata", "-c", "-o", filepath.Join(dir, "emu.o"), "testdata/emukernels.cc")
		objs, link = append(objs, filepath.Join(dir, "emu.o")), cxx
	}
	run(link, append([]string{"-shared", "-o", lib}, objs...)...)
	old := driverPath
	driverPath = lib
	t.Cleanup(func() { driverPath = old })
	h, err := purego.Dlopen(lib, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatal(err)
	}
	var l func(*byte) int64
	var f func() int64
	purego.RegisterLibFunc(&l, h, "fake_launches")
	purego.RegisterLibFunc(&f, h, "fake_frees")
	return func(name string) int64 { return l(cString(name)) }, f
}

// compiler is the first of names on PATH, or skips the test.
func compiler(t *testing.T, names ...string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skipf("no %s to build the fake driver", names[0])
	return ""
}

// TestOpenReportsDriverErrors: cuInit's failure and a GPU too old come back as one line
// with the driver's own description, through the real purego path.
func TestOpenReportsDriverErrors(t *testing.T) {
	fakeDriver(t)
	t.Setenv("FAKECUDA_INIT_ERROR", "100")
	_, err := Open(DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), "cuInit: no CUDA-capable device is detected (100)") {
		t.Fatalf("got %v", err)
	}
	t.Setenv("FAKECUDA_INIT_ERROR", "0")
	t.Setenv("FAKECUDA_CC_MAJOR", "7")
	if _, err = Open(DefaultConfig()); err == nil || !strings.Contains(err.Error(), "Fake GPU has compute capability 7.0; the kernels need 8.0") {
		t.Fatalf("got %v", err)
	}
}

// TestBackendPlumbingOnAFakeDriver drives the backend against the fake driver: the
// embedded PTX loads, every kernel is looked up, copies and memsets move the right bytes,
// a kernel's arguments arrive (scale and add are computed by the fake), host operands
// are staged and written back, every operation's launch matches its kernel's PTX
// parameters, and memory no tensor refers to is freed at Sync.
func TestBackendPlumbingOnAFakeDriver(t *testing.T) {
	launches, frees := fakeDriver(t)
	b, err := Open(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "cuda/Fake GPU/kernel" || !strings.Contains(b.Describe(), "cc 8.0") {
		t.Fatalf("name %q, describe %q", b.Name(), b.Describe())
	}

	x := []float32{1, 2, 3, 4, 5}
	d := b.Alloc(len(x), device.F32)
	b.CopyFromHost(d, x)
	b.Scale(d.Slice(1, 4), 10) // a view: the offset reaches the kernel
	got := make([]float32, len(x))
	b.CopyToHost(got, d)
	if want := []float32{1, 20, 30, 40, 5}; !equal(got, want) {
		t.Fatalf("scale of a view: %v, want %v", got, want)
	}

	h := []float32{1, 1, 1}
	b.Add(device.Host(h), device.Host(h), d.Slice(0, 3)) // host output aliasing a host input
	if want := []float32{2, 21, 31}; !equal(h, want) {
		t.Fatalf("add into a host tensor: %v, want %v", h, want)
	}
	b.Zero(d)
	b.Copy(d.Slice(0, 3), device.Host(h))
	b.CopyToHost(got, d)
	if want := []float32{2, 21, 31, 0, 0}; !equal(got, want) {
		t.Fatalf("zero then copy: %v, want %v", got, want)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}

	// Every operation once, on shapes the suite uses: the fake computes nothing but
	// scale and add, so only the plumbing is checked (a launch that does not match its
	// PTX parameters panics).
	exerciseEveryOp(b)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, names := range kernelNames {
		for _, n := range names {
			if launches(n) < 1 && n != "f32_to_bf16" && n != "bf16_to_f32" {
				t.Errorf("kernel %s was never launched", n)
			}
		}
	}

	before := frees()
	for range 10 {
		b.Alloc(1000, device.F32)
	}
	deadline := time.Now().Add(5 * time.Second)
	for frees() < before+10 && time.Now().Before(deadline) {
		runtime.GC()
		if err := b.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if frees() < before+10 {
		t.Fatalf("%d of 10 unreachable allocations freed", frees()-before)
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// exerciseEveryOp calls each Backend operation once with small shapes, with device
// tensors and some host operands (as the model's parameters are).
func exerciseEveryOp(b *Backend) {
	t := func(n int) device.Tensor { return b.Alloc(n, device.F32) }
	hst := func(n int) device.Tensor { return device.Host(make([]float32, n)) }
	const B, T, H, KVH, hd, V = 2, 5, 4, 2, 8, 11
	d := H * hd
	rows := B * T
	tok := make([]int32, rows)
	b.Gemm(false, true, 3, 4, 5, 1, t(15), 5, hst(20), 5, 0, t(12), 4)
	b.MatmulForward(t(rows*d), t(rows*d), hst(d*d), hst(d), rows, d, d)
	b.MatmulBackward(t(rows*d), hst(d*d), hst(d), t(rows*d), t(rows*d), hst(d*d), rows, d, d)
	b.EmbeddingForward(t(rows*d), hst(V*d), hst(T*d), tok, T, d)
	b.EmbeddingBackward(hst(V*d), hst(T*d), t(rows*d), tok, T, d, V)
	b.LayerNormForward(t(rows*d), t(rows), t(rows), t(rows*d), hst(d), hst(d), rows, d, 1e-5)
	b.LayerNormBackward(t(rows*d), hst(d), hst(d), t(rows*d), t(rows*d), t(rows), t(rows), hst(d), rows, d)
	b.GeluForward(t(7), t(7))
	b.GeluBackward(t(7), t(7), t(7))
	save := t(b.AttentionSaveLen(B, T, H))
	b.AttentionForward(t(rows*d), save, t(rows*3*d), B, T, H, hd)
	b.AttentionBackward(t(rows*3*d), t(rows*d), save, t(rows*3*d), B, T, H, hd)
	b.GroupedAttentionForward(t(rows*d), save, t(rows*d), t(rows*KVH*hd), t(rows*KVH*hd), B, T, H, KVH, hd)
	b.GroupedAttentionBackward(t(rows*d), t(rows*KVH*hd), t(rows*KVH*hd), t(rows*d), save, t(rows*d), t(rows*KVH*hd), t(rows*KVH*hd), B, T, H, KVH, hd)
	b.RMSNormForward(t(rows*d), t(rows), t(rows*d), hst(d), rows, d, 1e-5)
	b.RMSNormBackward(t(rows*d), hst(d), t(rows*d), t(rows*d), t(rows), hst(d), rows, d)
	b.RopeForward(t(rows*d), t(rows*d), hst(T*hd/2), hst(T*hd/2), rows, T, H, hd)
	b.RopeBackward(t(rows*d), t(rows*d), hst(T*hd/2), hst(T*hd/2), rows, T, H, hd)
	b.SwiGLUForward(t(9), t(9), t(9))
	b.SwiGLUBackward(t(9), t(9), t(9), t(9), t(9))
	losses := make([]float64, rows)
	logits := t(rows * V)
	b.CrossEntropy(losses, logits, logits, tok, V, 0.5)
	b.SumSquares(hst(300))
	b.AdamWStep(device.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}, hst(10), hst(10), t(10), t(10), 1, true)
}

// TestLaunchLimitsAreErrors: an attention grid past CUDA's 65535 second dimension is
// refused with a message and kept for Sync, and later operations are skipped.
func TestLaunchLimitsAreErrors(t *testing.T) {
	launches, _ := fakeDriver(t)
	b, err := Open(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	B, T, H, hd := 65536, 1, 1, 1
	qkv, out := b.Alloc(B*T*3*H*hd, device.F32), b.Alloc(B*T*H*hd, device.F32)
	b.AttentionForward(out, b.Alloc(b.AttentionSaveLen(B, T, H), device.F32), qkv, B, T, H, hd)
	b.Scale(out, 2)
	err = b.Sync()
	if err == nil || !strings.Contains(err.Error(), "B·H ≤ 65535") {
		t.Fatalf("got %v", err)
	}
	if launches("attention_forward") != 0 || launches("scale") != 0 {
		t.Fatal("a kernel ran after the failure")
	}
}

// TestConformanceOnEmulatedKernels runs the whole conformance suite through the real
// backend (purego, staging, launches) on the kernels' own CUDA C source, compiled for the
// host and run thread by thread by the fake driver: the kernels' index arithmetic,
// reductions, barriers and warp shuffles as written, without a GPU. What it cannot show
// is what nvcc/clang's device code generation, the PTX JIT and the hardware do. Nor can it
// show determinism: the fake driver runs blocks one after another and a block's threads in
// a fixed coroutine order, so two runs always agree whatever the kernels' atomics and
// reductions do on a GPU; Determinism is left to TestConformance on a device. (It was 165
// of this test's 225 s on the 2-vCPU CI machine, the emulated attention run twice.)
func TestConformanceOnEmulatedKernels(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every kernel's threads as host threads")
	}
	buildFake(t, true)
	b, err := Open(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range devicetest.Tests {
		if c.Name != "Determinism" {
			t.Run(c.Name, func(t *testing.T) { c.Fn(t, b) })
		}
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
}
