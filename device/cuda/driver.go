//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/meshnode/meshnode/internal/dynlib"
)

// driverLibrary is the CUDA driver API, installed by the NVIDIA driver and found through
// the dynamic loader's search path.
const driverLibrary = "libcuda.so.1"

// driverPath is the library Open loads: driverLibrary, or a stand-in in tests.
var driverPath = driverLibrary

// ErrNoDriver says the driver library could not be loaded: no NVIDIA driver here.
var ErrNoDriver = errors.New("no NVIDIA driver")

// driver is the part of the CUDA driver API the backend calls, bound through purego.
// Every function returns a CUresult.
type driver struct {
	handle uintptr

	init              func(flags uint32) cuResult
	driverGetVersion  func(v *int32) cuResult
	deviceGetCount    func(n *int32) cuResult
	deviceGet         func(dev *int32, ordinal int32) cuResult
	deviceGetName     func(buf *byte, n int32, dev int32) cuResult
	deviceGetAttr     func(v *int32, attr int32, dev int32) cuResult
	primaryCtxRetain  func(ctx *uintptr, dev int32) cuResult
	primaryCtxRelease func(dev int32) cuResult
	ctxSetCurrent     func(ctx uintptr) cuResult
	memAlloc          func(ptr *uint64, bytes uint64) cuResult
	memFree           func(ptr uint64) cuResult
	memGetInfo        func(free, total *uint64) cuResult
	memcpyHtoDAsync   func(dst uint64, src unsafe.Pointer, bytes uint64, stream uintptr) cuResult
	memcpyDtoHAsync   func(dst unsafe.Pointer, src uint64, bytes uint64, stream uintptr) cuResult
	memcpyDtoDAsync   func(dst, src uint64, bytes uint64, stream uintptr) cuResult
	memsetD32Async    func(dst uint64, v uint32, n uint64, stream uintptr) cuResult
	streamCreate      func(s *uintptr, flags uint32) cuResult
	streamDestroy     func(s uintptr) cuResult
	streamSynchronize func(s uintptr) cuResult
	eventCreate       func(e *uintptr, flags uint32) cuResult
	eventRecord       func(e, s uintptr) cuResult
	eventSynchronize  func(e uintptr) cuResult
	eventElapsedTime  func(ms *float32, start, end uintptr) cuResult
	eventDestroy      func(e uintptr) cuResult
	moduleLoadData    func(mod *uintptr, image unsafe.Pointer) cuResult
	moduleUnload      func(mod uintptr) cuResult
	moduleGetFunction func(fn *uintptr, mod uintptr, name *byte) cuResult
	launchKernel      func(f uintptr, gx, gy, gz, bx, by, bz, shared uint32, stream uintptr, params, extra unsafe.Pointer) cuResult
	getErrorString    func(r cuResult, s **byte) cuResult
}

// openDriver loads the driver library at path and binds every function the backend calls
// (the _v2 entry points, which every driver since CUDA 4 exports). A library that cannot
// be loaded is ErrNoDriver; one that lacks a function is another error naming it.
func openDriver(path string) (*driver, error) {
	h, err := dynlib.Open(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%s: not found (%w): %v", path, ErrNoDriver, err)
	}
	d := &driver{handle: h}
	for _, f := range []struct {
		fn   any
		name string
	}{
		{&d.init, "cuInit"},
		{&d.driverGetVersion, "cuDriverGetVersion"},
		{&d.deviceGetCount, "cuDeviceGetCount"},
		{&d.deviceGet, "cuDeviceGet"},
		{&d.deviceGetName, "cuDeviceGetName"},
		{&d.deviceGetAttr, "cuDeviceGetAttribute"},
		{&d.primaryCtxRetain, "cuDevicePrimaryCtxRetain"},
		{&d.primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
		{&d.ctxSetCurrent, "cuCtxSetCurrent"},
		{&d.memAlloc, "cuMemAlloc_v2"},
		{&d.memFree, "cuMemFree_v2"},
		{&d.memGetInfo, "cuMemGetInfo_v2"},
		{&d.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
		{&d.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
		{&d.memcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
		{&d.memsetD32Async, "cuMemsetD32Async"},
		{&d.streamCreate, "cuStreamCreate"},
		{&d.streamDestroy, "cuStreamDestroy_v2"},
		{&d.streamSynchronize, "cuStreamSynchronize"},
		{&d.eventCreate, "cuEventCreate"},
		{&d.eventRecord, "cuEventRecord"},
		{&d.eventSynchronize, "cuEventSynchronize"},
		{&d.eventElapsedTime, "cuEventElapsedTime"},
		{&d.eventDestroy, "cuEventDestroy_v2"},
		{&d.moduleLoadData, "cuModuleLoadData"},
		{&d.moduleUnload, "cuModuleUnload"},
		{&d.moduleGetFunction, "cuModuleGetFunction"},
		{&d.launchKernel, "cuLaunchKernel"},
		{&d.getErrorString, "cuGetErrorString"},
	} {
		if err := bind(h, f.fn, f.name); err != nil {
			_ = purego.Dlclose(h)
			return nil, fmt.Errorf("%s: %w (driver too old?)", path, err)
		}
	}
	return d, nil
}

// bind points fn at the library's function name.
func bind(lib uintptr, fn any, name string) error {
	sym, err := dynlib.Sym(lib, name)
	if err != nil || sym == 0 {
		return fmt.Errorf("no function %s", name)
	}
	purego.RegisterFunc(fn, sym)
	return nil
}

// check turns a CUresult into nil or an *Error naming call and the driver's description.
func (d *driver) check(call string, r cuResult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Code: int32(r)}
	var s *byte
	if d.getErrorString(r, &s) == 0 && s != nil {
		e.Text = goString(s)
	}
	return e
}

// goString copies the NUL-terminated C string at p.
func goString(p *byte) string {
	var n int
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// cString is s NUL-terminated, for a C function's const char*.
func cString(s string) *byte {
	b := append([]byte(s), 0)
	return &b[0]
}
