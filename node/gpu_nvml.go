//go:build cgo && linux

package node

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/meshnode/meshnode/mesh"
)

// detectGPUs lists NVIDIA GPUs through NVML. No driver library or no device is not an
// error: it reports no GPU.
func detectGPUs() ([]mesh.GPU, error) { return gpusFromNVML(nvml.New()) }

// gpusFromNVML queries lib (the real library, or go-nvml's mock in tests).
func gpusFromNVML(lib nvml.Interface) (gpus []mesh.GPU, err error) {
	if ret := initNVML(lib); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND || ret == nvml.ERROR_DRIVER_NOT_LOADED || ret == nvml.ERROR_NO_PERMISSION {
			return nil, nil
		}
		return nil, fmt.Errorf("nvml init: %s", lib.ErrorString(ret))
	}
	defer lib.Shutdown()
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvml device count: %s", lib.ErrorString(ret))
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

func describeGPU(lib nvml.Interface, i int) (mesh.GPU, error) {
	dev, ret := lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return mesh.GPU{}, fmt.Errorf("nvml device %d: %s", i, lib.ErrorString(ret))
	}
	g := mesh.GPU{Index: i}
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return g, fmt.Errorf("nvml device %d name: %s", i, lib.ErrorString(ret))
	}
	g.UUID, _ = dev.GetUUID()
	if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
		g.MemoryTotalBytes, g.MemoryFreeBytes = mem.Total, mem.Free
	}
	if attrs, ret := dev.GetAttributes(); ret == nvml.SUCCESS {
		g.Multiprocessors = int(attrs.MultiprocessorCount)
	}
	if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		g.SMClockMHz = mhz
	}
	if mhz, ret := dev.GetMaxClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		g.MemoryClockMHz = mhz
	}
	if major, minor, ret := dev.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	return g, nil
}

// initNVML initialises lib, reporting a panic (some go-nvml versions panic when
// libnvidia-ml.so is missing) as a missing library.
func initNVML(lib nvml.Interface) (ret nvml.Return) {
	defer func() {
		if r := recover(); r != nil {
			ret = nvml.ERROR_LIBRARY_NOT_FOUND
		}
	}()
	return lib.Init()
}
