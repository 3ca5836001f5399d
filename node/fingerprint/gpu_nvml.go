package fingerprint

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/meshnode/meshnode/mesh"
)

// nvmlLibrary is the part of NVML the profiler uses: the driver's libnvidia-ml loaded at
// run time (gpu_nvml_dlopen.go), or a mock in tests. Its calls return NVML's own codes.
type nvmlLibrary interface {
	Init() nvmlReturn
	Shutdown() nvmlReturn
	DeviceCount() (int, nvmlReturn)
	Device(index int) (nvmlDevice, nvmlReturn)
}

// nvmlDevice is one GPU as NVML answers for it.
type nvmlDevice interface {
	Name() (string, nvmlReturn)
	UUID() (string, nvmlReturn)
	MemoryInfo() (nvmlMemory, nvmlReturn)
	Attributes() (nvmlAttributes, nvmlReturn)
	MaxClock(clock nvmlClock) (uint32, nvmlReturn)
	ComputeCapability() (major, minor int, ret nvmlReturn)
}

// nvmlMemory is nvmlMemory_t: the device's framebuffer in bytes.
type nvmlMemory struct {
	Total, Free, Used uint64
}

// nvmlAttributes is nvmlDeviceAttributes_t (the layout of _v2).
type nvmlAttributes struct {
	MultiprocessorCount       uint32
	SharedCopyEngineCount     uint32
	SharedDecoderCount        uint32
	SharedEncoderCount        uint32
	SharedJpegCount           uint32
	SharedOfaCount            uint32
	GpuInstanceSliceCount     uint32
	ComputeInstanceSliceCount uint32
	MemorySizeMB              uint64
}

// nvmlClock is nvmlClockType_t.
type nvmlClock uint32

// The clocks the profile reports (nvml.h: NVML_CLOCK_SM, NVML_CLOCK_MEM).
const (
	nvmlClockSM  nvmlClock = 1
	nvmlClockMem nvmlClock = 2
)

// maxNVMLDevices bounds the device count NVML reports before anything is allocated for it;
// mesh.Profile.Validate refuses more than 64 GPUs anyway.
const maxNVMLDevices = 64

// gpusFromNVML queries lib and translates its answers into the profile's GPU list. No
// driver, no library or no permission is not an error: it reports no GPU. A device that
// cannot be named is left out and reported; its missing details (UUID, memory, clocks,
// compute capability) are left zero.
func gpusFromNVML(lib nvmlLibrary) (gpus []mesh.GPU, err error) {
	if ret := lib.Init(); ret != nvmlSuccess {
		if ret.meansNoGPU() {
			return nil, nil
		}
		return nil, fmt.Errorf("nvml init: %w", ret)
	}
	defer lib.Shutdown()
	count, ret := lib.DeviceCount()
	if ret != nvmlSuccess {
		return nil, fmt.Errorf("nvml device count: %w", ret)
	}
	if count < 0 || count > maxNVMLDevices {
		return nil, fmt.Errorf("nvml device count %d: outside 0..%d", count, maxNVMLDevices)
	}
	var errs []error
	for i := range count {
		g, err := describeGPU(lib, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		gpus = append(gpus, g)
	}
	return gpus, errors.Join(errs...)
}

// describeGPU reads device i's profile entry.
func describeGPU(lib nvmlLibrary, i int) (mesh.GPU, error) {
	dev, ret := lib.Device(i)
	if ret != nvmlSuccess {
		return mesh.GPU{}, fmt.Errorf("nvml device %d: %w", i, ret)
	}
	g := mesh.GPU{Index: i}
	name, ret := dev.Name()
	if ret != nvmlSuccess {
		return g, fmt.Errorf("nvml device %d name: %w", i, ret)
	}
	g.Name = cleanNVMLString(name)
	if uuid, ret := dev.UUID(); ret == nvmlSuccess {
		g.UUID = cleanNVMLString(uuid)
	}
	if mem, ret := dev.MemoryInfo(); ret == nvmlSuccess {
		g.MemoryTotalBytes, g.MemoryFreeBytes = mem.Total, mem.Free
	}
	if attrs, ret := dev.Attributes(); ret == nvmlSuccess {
		g.Multiprocessors = int(attrs.MultiprocessorCount)
	}
	if mhz, ret := dev.MaxClock(nvmlClockSM); ret == nvmlSuccess {
		g.SMClockMHz = mhz
	}
	if mhz, ret := dev.MaxClock(nvmlClockMem); ret == nvmlSuccess {
		g.MemoryClockMHz = mhz
	}
	if major, minor, ret := dev.ComputeCapability(); ret == nvmlSuccess && major >= 0 && minor >= 0 {
		g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	return g, nil
}

// maxNVMLString bounds every string taken from NVML (its own buffers are 96 bytes).
const maxNVMLString = 96

// cleanNVMLString keeps what the profile may carry of an NVML string: at most
// maxNVMLString bytes of valid UTF-8 without surrounding spaces.
func cleanNVMLString(s string) string {
	if len(s) > maxNVMLString {
		s = s[:maxNVMLString]
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	return strings.TrimSpace(s)
}
