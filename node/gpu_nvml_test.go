//go:build cgo && linux

package node

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
)

// dgxWithClocks is go-nvml's DGX A100 mock with the queries it leaves unset filled in.
func dgxWithClocks() *dgxa100.Server {
	s := dgxa100.New()
	for _, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{MultiprocessorCount: 108}, nvml.SUCCESS
		}
		dev.GetMaxClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
			if c == nvml.CLOCK_SM {
				return 1410, nvml.SUCCESS
			}
			return 1215, nvml.SUCCESS
		}
	}
	return s
}

func TestGPUsFromNVMLMock(t *testing.T) {
	gpus, err := gpusFromNVML(dgxWithClocks())
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	g := gpus[3]
	if g.Index != 3 || g.Name != "Mock NVIDIA A100-SXM4-40GB" || g.MemoryTotalBytes != 42949672960 ||
		g.Multiprocessors != 108 || g.SMClockMHz != 1410 || g.MemoryClockMHz != 1215 || g.ComputeCapability != "8.0" || g.UUID == "" {
		t.Errorf("GPU 3 = %+v", g)
	}
}

func TestNVMLWithoutDriverReportsNoGPU(t *testing.T) {
	for _, ret := range []nvml.Return{nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED} {
		lib := &mock.Interface{InitFunc: func() nvml.Return { return ret }}
		if gpus, err := gpusFromNVML(lib); err != nil || len(gpus) != 0 {
			t.Errorf("%v: %v, %v; want no GPU and no error", ret, gpus, err)
		}
	}
	panicky := &mock.Interface{InitFunc: func() nvml.Return { panic("no libnvidia-ml.so") }}
	if gpus, err := gpusFromNVML(panicky); err != nil || len(gpus) != 0 {
		t.Errorf("panicking init: %v, %v", gpus, err)
	}
}

func TestNVMLDeviceErrorIsReported(t *testing.T) {
	s := dgxWithClocks()
	s.ErrorStringFunc = func(r nvml.Return) string { return nvml.ErrorString(r) }
	s.Devices[1].(*dgxa100.Device).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	gpus, err := gpusFromNVML(s)
	if err == nil || len(gpus) != 7 {
		t.Errorf("got %d GPUs and err %v; want 7 and an error naming device 1", len(gpus), err)
	}
}

// TestDetectGPUsOnThisMachine runs the real NVML path: no GPU (and no error) where there is
// no driver, the devices where there is one.
func TestDetectGPUsOnThisMachine(t *testing.T) {
	gpus, err := detectGPUs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("GPUs here: %+v", gpus)
}
