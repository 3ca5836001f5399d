//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/meshnode/meshnode/device"
)

// Backend is device.Backend on one NVIDIA GPU: its tensors are device memory, its
// operations are launched on one stream in call order, and the first failure is kept
// and returned by Sync. Host tensors (the model's parameters, until they live on the
// device) are accepted as operands: they are copied to the device for the operation and,
// when written, back (docs/gpu.md).
//
// It is not safe for concurrent use.
type Backend struct {
	drv     *driver
	lt      *cublasLt // nil when cuBLASLt is absent
	ltErr   error     // why lt is nil
	cfg     Config
	dev     int32
	ctx     uintptr
	stream  uintptr
	modules []uintptr
	fns     map[string]uintptr
	sigs    map[string][]ptxParam // each kernel's PTX parameter types, checked at launch
	name    string
	cc      [2]int // compute capability
	totalB  uint64 // device memory
	partial uint64 // sum_squares_partial's output, sumSquaresBlocks doubles

	err       error // the first failure since Open
	stage     stageArena
	writeback []writeback

	freeMu sync.Mutex
	toFree []uint64 // allocations no tensor refers to any more, freed at Sync
}

var _ device.Backend = (*Backend)(nil)

// minComputeCapability is what sm_80 PTX needs: Ampere (8.0) or newer.
const minComputeCapability = 80

// CUdevice_attribute values (cuda.h).
const (
	attrComputeMajor = 75
	attrComputeMinor = 76
)

// Open loads the driver, makes device cfg.Ordinal's primary context current, loads the
// embedded kernels and, when present, cuBLASLt. Its error says what is missing: the
// driver library, a device, a new enough GPU, a kernel the driver refuses.
func Open(cfg Config) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GEMM == "" {
		cfg.GEMM = GemmKernel
	}
	drv, err := openDriver(driverPath)
	if err != nil {
		return nil, err
	}
	b := &Backend{drv: drv, cfg: cfg, fns: map[string]uintptr{}, sigs: map[string][]ptxParam{}}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.open(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) open() error {
	d := b.drv
	if err := d.check("cuInit", d.init(0)); err != nil {
		return fmt.Errorf("%s: %w (driver installed but unusable: no GPU visible?)", driverLibrary, err)
	}
	var n int32
	if err := d.check("cuDeviceGetCount", d.deviceGetCount(&n)); err != nil {
		return err
	}
	if int(n) <= b.cfg.Ordinal {
		return fmt.Errorf("cuda: device %d requested, %d visible (CUDA_VISIBLE_DEVICES?)", b.cfg.Ordinal, n)
	}
	if err := d.check("cuDeviceGet", d.deviceGet(&b.dev, int32(b.cfg.Ordinal))); err != nil {
		return err
	}
	var buf [256]byte
	if err := d.check("cuDeviceGetName", d.deviceGetName(&buf[0], int32(len(buf)), b.dev)); err != nil {
		return err
	}
	b.name = goString(&buf[0])
	var major, minor int32
	if err := d.check("cuDeviceGetAttribute", d.deviceGetAttr(&major, attrComputeMajor, b.dev)); err != nil {
		return err
	}
	if err := d.check("cuDeviceGetAttribute", d.deviceGetAttr(&minor, attrComputeMinor, b.dev)); err != nil {
		return err
	}
	b.cc = [2]int{int(major), int(minor)}
	if int(major)*10+int(minor) < minComputeCapability {
		return fmt.Errorf("cuda: %s has compute capability %d.%d; the kernels need 8.0 (Ampere) or newer", b.name, major, minor)
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.primaryCtxRetain(&b.ctx, b.dev)); err != nil {
		return err
	}
	if err := d.check("cuCtxSetCurrent", d.ctxSetCurrent(b.ctx)); err != nil {
		return err
	}
	var free uint64
	if err := d.check("cuMemGetInfo", d.memGetInfo(&free, &b.totalB)); err != nil {
		return err
	}
	const streamNonBlocking = 1
	if err := d.check("cuStreamCreate", d.streamCreate(&b.stream, streamNonBlocking)); err != nil {
		return err
	}
	if err := b.loadKernels(); err != nil {
		return err
	}
	if err := d.check("cuMemAlloc", d.memAlloc(&b.partial, sumSquaresBlocks*8)); err != nil {
		return err
	}
	b.lt, b.ltErr = openCublasLt(cublasLtLibraries)
	if b.lt == nil && b.cfg.GEMM != GemmKernel {
		return fmt.Errorf("cuda: gemm %s: %w", b.cfg.GEMM, b.ltErr)
	}
	return nil
}

// loadKernels loads every embedded PTX module and looks up the kernels it must define.
func (b *Backend) loadKernels() error {
	for mod, names := range kernelNames {
		src, err := ptxSource(mod)
		if err != nil {
			return err
		}
		sigs, err := ptxSignatures(string(src))
		if err != nil {
			return fmt.Errorf("%s: %w", mod, err)
		}
		var m uintptr
		if err := b.drv.check("cuModuleLoadData "+mod, b.drv.moduleLoadData(&m, unsafe.Pointer(&src[0]))); err != nil {
			return err
		}
		b.modules = append(b.modules, m)
		for _, name := range names {
			var f uintptr
			if err := b.drv.check("cuModuleGetFunction "+name, b.drv.moduleGetFunction(&f, m, cString(name))); err != nil {
				return err
			}
			b.fns[name], b.sigs[name] = f, sigs[name]
		}
	}
	return nil
}

// Close releases the stream, the modules, the staging memory and the context. Tensors
// the backend allocated must not be used afterwards.
func (b *Backend) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := b.drv
	if b.ctx != 0 {
		d.ctxSetCurrent(b.ctx)
	}
	var errs []error
	if b.stream != 0 {
		errs = append(errs, d.check("cuStreamSynchronize", d.streamSynchronize(b.stream)))
	}
	b.freePending()
	for _, c := range b.stage.chunks {
		d.memFree(c.ptr)
	}
	b.stage.chunks = nil
	if b.partial != 0 {
		d.memFree(b.partial)
	}
	for _, m := range b.modules {
		d.moduleUnload(m)
	}
	if b.stream != 0 {
		d.streamDestroy(b.stream)
	}
	if b.lt != nil {
		b.lt.close()
	}
	if b.ctx != 0 {
		d.primaryCtxRelease(b.dev)
	}
	b.ctx, b.stream, b.modules = 0, 0, nil
	return errors.Join(errs...)
}

// Name is "cuda/" with the GPU's name and the GEMM path, e.g. "cuda/NVIDIA H100 80GB HBM3/kernel".
func (b *Backend) Name() string { return "cuda/" + b.name + "/" + b.cfg.GEMM }

// Device is CUDA device Ordinal.
func (b *Backend) Device() device.Device {
	return device.Device{Kind: device.CUDA, Index: b.cfg.Ordinal}
}

// Describe is one line about the device for logs and `meshnode version`: its name,
// compute capability, memory and whether cuBLASLt was found.
func (b *Backend) Describe() string {
	lt := "cuBLASLt " + "absent"
	if b.lt != nil {
		lt = "cuBLASLt " + b.lt.soname
	}
	return fmt.Sprintf("%s (cc %d.%d, %.1f GiB), %s, gemm %s", b.name, b.cc[0], b.cc[1], float64(b.totalB)/(1<<30), lt, b.cfg.GEMM)
}

// Sync waits for the stream, frees memory no tensor refers to any more, and returns the
// first error since Open.
func (b *Backend) Sync() error {
	if !b.enter() {
		return b.err
	}
	defer b.leave()
	b.fail(b.drv.check("cuStreamSynchronize", b.drv.streamSynchronize(b.stream)))
	b.freePending()
	return b.err
}

// fail keeps err when it is the first failure.
func (b *Backend) fail(err error) {
	if err != nil && b.err == nil {
		b.err = err
	}
}

// enter makes the context current on this goroutine's thread for one operation; false
// means an earlier failure stops the operation (it is skipped; Sync reports the failure).
func (b *Backend) enter() bool {
	runtime.LockOSThread()
	if b.err != nil {
		runtime.UnlockOSThread()
		return false
	}
	if err := b.drv.check("cuCtxSetCurrent", b.drv.ctxSetCurrent(b.ctx)); err != nil {
		b.fail(err)
		runtime.UnlockOSThread()
		return false
	}
	return true
}

// leave finishes an operation: host outputs are copied back, the staging memory is
// reused by the next operation.
func (b *Backend) leave() {
	b.flushWriteback()
	b.stage.reset()
	runtime.UnlockOSThread()
}
