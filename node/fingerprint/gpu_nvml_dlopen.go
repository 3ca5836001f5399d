//go:build cgo && linux && (amd64 || arm64) && !nonvml

package fingerprint

import (
	"errors"
	"fmt"

	"github.com/ebitengine/purego"

	"github.com/meshnode/meshnode/internal/dynlib"
	"github.com/meshnode/meshnode/mesh"
)

// nvmlLibraryName is the driver's NVML library, found through the dynamic loader's search
// path as the driver installs it.
const nvmlLibraryName = "libnvidia-ml.so.1"

// errNVMLAbsent says the NVML library could not be loaded: no NVIDIA driver here.
var errNVMLAbsent = errors.New("no NVML library")

// GPUDetection says how this build finds GPUs, for `meshnode version`.
func GPUDetection() string { return "nvml (dlopen " + nvmlLibraryName + ")" }

// detectGPUs lists NVIDIA GPUs through the driver's NVML, loaded at run time without cgo.
// No library, no driver or no device is not an error: it reports no GPU.
func detectGPUs() ([]mesh.GPU, error) {
	lib, err := openNVML(nvmlLibraryName)
	if errors.Is(err, errNVMLAbsent) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer lib.close()
	return gpusFromNVML(lib)
}

// dlopenNVML is nvmlLibrary over libnvidia-ml's C functions, called through purego.
type dlopenNVML struct {
	handle uintptr

	init          func() nvmlReturn
	shutdown      func() nvmlReturn
	deviceCount   func(count *uint32) nvmlReturn
	handleByIndex func(index uint32, dev *uintptr) nvmlReturn
	name          func(dev uintptr, buf *byte, length uint32) nvmlReturn
	uuid          func(dev uintptr, buf *byte, length uint32) nvmlReturn
	memoryInfo    func(dev uintptr, mem *nvmlMemory) nvmlReturn
	attributes    func(dev uintptr, attrs *nvmlAttributes) nvmlReturn
	maxClock      func(dev uintptr, clock uint32, mhz *uint32) nvmlReturn
	computeCap    func(dev uintptr, major, minor *int32) nvmlReturn
}

// openNVML loads the NVML library at path and binds the functions the profiler calls.
// A library that cannot be loaded is errNVMLAbsent; one that lacks a required function
// is another error. Functions only some drivers have are bound when present.
func openNVML(path string) (*dlopenNVML, error) {
	h, err := dynlib.Open(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errNVMLAbsent, path, err)
	}
	l := &dlopenNVML{handle: h}
	required := []struct {
		fn    any
		names []string // the newest version first
	}{
		{&l.init, []string{"nvmlInit_v2", "nvmlInit"}},
		{&l.shutdown, []string{"nvmlShutdown"}},
		{&l.deviceCount, []string{"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}},
		{&l.handleByIndex, []string{"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}},
		{&l.name, []string{"nvmlDeviceGetName"}},
	}
	for _, f := range required {
		if !l.bind(f.fn, f.names...) {
			l.close()
			return nil, fmt.Errorf("%s has no %s: driver too old", path, f.names[0])
		}
	}
	l.bind(&l.uuid, "nvmlDeviceGetUUID")
	l.bind(&l.memoryInfo, "nvmlDeviceGetMemoryInfo")
	l.bind(&l.attributes, "nvmlDeviceGetAttributes_v2")
	l.bind(&l.maxClock, "nvmlDeviceGetMaxClockInfo")
	l.bind(&l.computeCap, "nvmlDeviceGetCudaComputeCapability")
	return l, nil
}

// bind points fn at the first of names the library exports and reports whether one was.
func (l *dlopenNVML) bind(fn any, names ...string) bool {
	for _, name := range names {
		if sym, err := dynlib.Sym(l.handle, name); err == nil && sym != 0 {
			purego.RegisterFunc(fn, sym)
			return true
		}
	}
	return false
}

// close unloads the library; call it after Shutdown.
func (l *dlopenNVML) close() { _ = purego.Dlclose(l.handle) }

func (l *dlopenNVML) Init() nvmlReturn     { return l.init() }
func (l *dlopenNVML) Shutdown() nvmlReturn { return l.shutdown() }

func (l *dlopenNVML) DeviceCount() (int, nvmlReturn) {
	var n uint32
	ret := l.deviceCount(&n)
	return int(n), ret
}

func (l *dlopenNVML) Device(index int) (nvmlDevice, nvmlReturn) {
	var dev uintptr
	if ret := l.handleByIndex(uint32(index), &dev); ret != nvmlSuccess {
		return nil, ret
	}
	return dlopenDevice{lib: l, dev: dev}, nvmlSuccess
}
