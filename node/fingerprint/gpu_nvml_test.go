package fingerprint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/mesh"
)

// mockNVML answers as NVML does on a DGX A100 (8 × A100-SXM4-40GB), with per-test faults.
type mockNVML struct {
	initRet     nvmlReturn
	count       int
	countRet    nvmlReturn
	devices     []*mockGPU
	initCalls   int
	shutdowns   int
	deviceCalls int
}

type mockGPU struct {
	name       string
	nameRet    nvmlReturn
	uuid       string
	mem        nvmlMemory
	sms        uint32
	clocks     map[nvmlClock]uint32
	major      int
	minor      int
	ccRet      nvmlReturn
	handleFail nvmlReturn
}

func dgxA100Mock() *mockNVML {
	m := &mockNVML{count: 8}
	for i := range 8 {
		m.devices = append(m.devices, &mockGPU{
			name:   "NVIDIA A100-SXM4-40GB",
			uuid:   fmt.Sprintf("GPU-a100-%02d", i),
			mem:    nvmlMemory{Total: 42949672960, Free: 42314399744, Used: 635273216},
			sms:    108,
			clocks: map[nvmlClock]uint32{nvmlClockSM: 1410, nvmlClockMem: 1215},
			major:  8,
		})
	}
	return m
}

func (m *mockNVML) Init() nvmlReturn     { m.initCalls++; return m.initRet }
func (m *mockNVML) Shutdown() nvmlReturn { m.shutdowns++; return nvmlSuccess }
func (m *mockNVML) DeviceCount() (int, nvmlReturn) {
	return m.count, m.countRet
}

func (m *mockNVML) Device(i int) (nvmlDevice, nvmlReturn) {
	m.deviceCalls++
	if i < 0 || i >= len(m.devices) {
		return nil, 2 // NVML_ERROR_INVALID_ARGUMENT
	}
	if d := m.devices[i]; d.handleFail != nvmlSuccess {
		return nil, d.handleFail
	}
	return m.devices[i], nvmlSuccess
}

func (g *mockGPU) Name() (string, nvmlReturn)           { return g.name, g.nameRet }
func (g *mockGPU) UUID() (string, nvmlReturn)           { return g.uuid, nvmlSuccess }
func (g *mockGPU) MemoryInfo() (nvmlMemory, nvmlReturn) { return g.mem, nvmlSuccess }
func (g *mockGPU) Attributes() (nvmlAttributes, nvmlReturn) {
	return nvmlAttributes{MultiprocessorCount: g.sms, MemorySizeMB: g.mem.Total >> 20}, nvmlSuccess
}

func (g *mockGPU) MaxClock(c nvmlClock) (uint32, nvmlReturn) {
	mhz, ok := g.clocks[c]
	if !ok {
		return 0, 3 // NVML_ERROR_NOT_SUPPORTED
	}
	return mhz, nvmlSuccess
}

func (g *mockGPU) ComputeCapability() (int, int, nvmlReturn) { return g.major, g.minor, g.ccRet }

func TestGPUsFromNVMLMock(t *testing.T) {
	lib := dgxA100Mock()
	lib.devices[3].minor = 6 // tell the minor version apart from the zero value
	gpus, err := gpusFromNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 {
		t.Fatalf("%d GPUs, want 8", len(gpus))
	}
	g := gpus[3]
	if g.Index != 3 || g.Name != "NVIDIA A100-SXM4-40GB" || g.UUID != "GPU-a100-03" ||
		g.MemoryTotalBytes != 42949672960 || g.MemoryFreeBytes != 42314399744 ||
		g.Multiprocessors != 108 || g.SMClockMHz != 1410 || g.MemoryClockMHz != 1215 ||
		g.ComputeCapability != "8.6" {
		t.Errorf("GPU 3 = %+v", g)
	}
	if lib.initCalls != 1 || lib.shutdowns != 1 {
		t.Errorf("init %d times, shutdown %d times; want once each", lib.initCalls, lib.shutdowns)
	}
}

func TestNVMLWithoutDriverReportsNoGPU(t *testing.T) {
	for _, ret := range []nvmlReturn{nvmlErrorLibraryNotFound, nvmlErrorDriverNotLoaded, nvmlErrorNoPermission} {
		lib := dgxA100Mock()
		lib.initRet = ret
		if gpus, err := gpusFromNVML(lib); err != nil || len(gpus) != 0 {
			t.Errorf("%v: %v, %v; want no GPU and no error", ret, gpus, err)
		}
		if lib.shutdowns != 0 || lib.deviceCalls != 0 {
			t.Errorf("%v: queried a library that did not initialise", ret)
		}
	}
}

func TestNVMLInitFaultIsReported(t *testing.T) {
	lib := dgxA100Mock()
	lib.initRet = 18 // NVML_ERROR_LIB_RM_VERSION_MISMATCH
	_, err := gpusFromNVML(lib)
	if err == nil || !strings.Contains(err.Error(), "version mismatch") {
		t.Fatalf("err %v; want the NVML init failure in words", err)
	}
	var ret nvmlReturn
	if !errors.As(err, &ret) || ret != 18 {
		t.Errorf("err %v does not carry NVML's code", err)
	}
}

func TestNVMLDeviceErrorIsReported(t *testing.T) {
	lib := dgxA100Mock()
	lib.devices[1].nameRet = nvmlErrorGPUIsLost
	lib.devices[5].handleFail = nvmlErrorUnknown
	gpus, err := gpusFromNVML(lib)
	if len(gpus) != 6 || err == nil {
		t.Fatalf("got %d GPUs and err %v; want 6 and an error", len(gpus), err)
	}
	for _, want := range []string{"nvml device 1 name: GPU is lost", "nvml device 5: Unknown Error"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q lacks %q", err, want)
		}
	}
	if gpus[1].Index != 2 || lib.shutdowns != 1 {
		t.Errorf("after the failed devices: %+v, %d shutdowns", gpus[1], lib.shutdowns)
	}
}

func TestNVMLMissingDetailsLeaveZeros(t *testing.T) {
	lib := dgxA100Mock()
	lib.count = 1
	d := lib.devices[0]
	d.clocks = nil
	d.ccRet = nvmlErrorFunctionNotFound
	gpus, err := gpusFromNVML(lib)
	if err != nil || len(gpus) != 1 {
		t.Fatalf("%v, %v", gpus, err)
	}
	if g := gpus[0]; g.SMClockMHz != 0 || g.MemoryClockMHz != 0 || g.ComputeCapability != "" || g.MemoryTotalBytes == 0 {
		t.Errorf("GPU = %+v; want no clocks or compute capability, memory kept", g)
	}
}

func TestNVMLDeviceCountIsBounded(t *testing.T) {
	for _, count := range []int{-1, maxNVMLDevices + 1, 1 << 30} {
		lib := dgxA100Mock()
		lib.count = count
		if gpus, err := gpusFromNVML(lib); err == nil || gpus != nil || lib.deviceCalls != 0 {
			t.Errorf("count %d: %d GPUs, err %v, %d device queries", count, len(gpus), err, lib.deviceCalls)
		}
	}
}

func TestNVMLStringsAreBoundedAndValid(t *testing.T) {
	lib := dgxA100Mock()
	lib.count = 1
	lib.devices[0].name = "  " + strings.Repeat("x", 500)
	lib.devices[0].uuid = "GPU-\xff\xfe-1"
	gpus, err := gpusFromNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(gpus[0].Name); n > maxNVMLString {
		t.Errorf("name of %d bytes", n)
	}
	if gpus[0].UUID != "GPU-?-1" {
		t.Errorf("uuid %q", gpus[0].UUID)
	}
}

func TestNVMLReturnText(t *testing.T) {
	for ret, want := range map[nvmlReturn]string{
		nvmlErrorLibraryNotFound: "NVML Shared Library Not Found (NVML 12)",
		30:                       "The reset type is not supported (NVML 30)",
		31:                       "NVML error 31",
		nvmlErrorUnknown:         "Unknown Error (NVML 999)",
	} {
		if got := ret.Error(); got != want {
			t.Errorf("%d: %q, want %q", uint32(ret), got, want)
		}
	}
}

// TestProfileCarriesNVMLGPUs: the GPUs NVML reports reach the profile a node gossips, and
// that profile passes the checks a receiving peer applies; a faulty device is a warning,
// not a failed profile.
func TestProfileCarriesNVMLGPUs(t *testing.T) {
	lib := dgxA100Mock()
	p := fakeProfiler(defaultConfig())
	p.gpus.detect = func() ([]mesh.GPU, error) { return gpusFromNVML(lib) }
	prof, warn := p.Measure(context.Background())
	if warn != nil {
		t.Fatal(warn)
	}
	if len(prof.GPUs) != 8 || prof.GPUs[7].Name != "NVIDIA A100-SXM4-40GB" || prof.GPUs[7].ComputeCapability != "8.0" {
		t.Fatalf("profile GPUs %+v", prof.GPUs)
	}
	if err := prof.Validate(); err != nil {
		t.Errorf("a peer would refuse this profile: %v", err)
	}
	lib.devices[7].nameRet = nvmlErrorGPUIsLost
	if _, warn = p.Measure(context.Background()); warn == nil || !strings.Contains(warn.Error(), "GPU detection: nvml device 7 name: GPU is lost") {
		t.Errorf("warning %v; want GPU 7's failure", warn)
	}
}
