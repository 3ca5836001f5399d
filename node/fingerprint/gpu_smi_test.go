package fingerprint

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/mesh"
)

// An H100 and an old card, as nvidia-smi answers for smiFields (driver 550; the second
// card reports no max memory clock).
const smiTwoGPUs = `0, NVIDIA H100 80GB HBM3, GPU-1d2c3b4a-0000-1111-2222-333344445555, 81559, 81001, 1980, 2619, 9.0
1, Tesla K80, GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 11441, 11300, 875, [N/A], 3.7
`

func TestParseSMI(t *testing.T) {
	gpus, err := parseSMI([]byte(smiTwoGPUs), smiFields)
	if err != nil {
		t.Fatal(err)
	}
	want := []mesh.GPU{
		{Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-1d2c3b4a-0000-1111-2222-333344445555",
			MemoryTotalBytes: 81559 << 20, MemoryFreeBytes: 81001 << 20, SMClockMHz: 1980, MemoryClockMHz: 2619, ComputeCapability: "9.0"},
		{Index: 1, Name: "Tesla K80", UUID: "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
			MemoryTotalBytes: 11441 << 20, MemoryFreeBytes: 11300 << 20, SMClockMHz: 875, ComputeCapability: "3.7"},
	}
	if len(gpus) != len(want) {
		t.Fatalf("got %+v, want %+v", gpus, want)
	}
	for i := range want {
		if gpus[i] != want[i] {
			t.Errorf("GPU %d: %+v, want %+v", i, gpus[i], want[i])
		}
	}
}

func TestParseSMIRefusesWhatItCannotUse(t *testing.T) {
	for name, tc := range map[string]struct {
		out    string
		gpus   int
		errHas string
	}{
		"no name":              {"0, [N/A], GPU-x, 100, 50, 1, 1, 8.0\n" + strings.SplitN(smiTwoGPUs, "\n", 2)[0] + "\n", 1, "no name"},
		"bad index":            {"x, A100, GPU-x, 100, 50, 1, 1, 8.0\n", 0, "index"},
		"wrong field count":    {"0, A100, GPU-x\n", 0, "unexpected output"},
		"free over total":      {"0, A100, GPU-x, 100, 500, 1, 1, 8.0\n", 1, ""},
		"garbage capability":   {"0, A100, GPU-x, 100, 50, 1, 1, 8.0; rm\n", 1, ""},
		"huge memory is zero":  {"0, A100, GPU-x, 99999999999999, 50, 1, 1, 8.0\n", 1, ""},
		"too many devices":     {strings.Repeat("0, A100, GPU-x, 100, 50, 1, 1, 8.0\n", maxNVMLDevices+1), maxNVMLDevices, "more than"},
		"empty answer":         {"", 0, ""},
		"quote in a name":      {"0, A\"100, GPU-x, 100, 50, 1, 1, 8.0\n", 0, "unexpected output"},
		"name over the bounds": {"0, " + strings.Repeat("A", 300) + ", GPU-x, 100, 50, 1, 1, 8.0\n", 1, ""},
	} {
		gpus, err := parseSMI([]byte(tc.out), smiFields)
		if len(gpus) != tc.gpus || (tc.errHas == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.errHas)) {
			t.Errorf("%s: %d GPUs, err %v; want %d GPUs and an error containing %q", name, len(gpus), err, tc.gpus, tc.errHas)
		}
		for _, g := range gpus {
			if g.MemoryFreeBytes > g.MemoryTotalBytes || len(g.Name) > maxNVMLString || (g.ComputeCapability != "" && !computeCapability.MatchString(g.ComputeCapability)) {
				t.Errorf("%s: GPU outside the profile's bounds: %+v", name, g)
			}
		}
	}
}

// fakeSMI writes an executable nvidia-smi stand-in running script (sh) into a fresh
// directory and returns its path.
func fakeSMI(t *testing.T, script string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in is a shell script")
	}
	path := filepath.Join(t.TempDir(), "nvidia-smi")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGPUsFromSMIRunsTheTool runs the exec path against stand-ins of nvidia-smi: a current
// driver, one older than 510 (no compute_cap field), no driver, a fault, and no tool.
func TestGPUsFromSMIRunsTheTool(t *testing.T) {
	ctx := context.Background()
	current := fakeSMI(t, `case "$1" in --query-gpu=index,name,uuid,memory.total,memory.free,clocks.max.sm,clocks.max.memory,compute_cap) ;; *) exit 2;; esac
[ "$2" = "--format=csv,noheader,nounits" ] || exit 2
cat <<'OUT'
`+smiTwoGPUs+`OUT
`)
	if gpus, err := gpusFromSMI(ctx, current); err != nil || len(gpus) != 2 || gpus[0].ComputeCapability != "9.0" {
		t.Fatalf("current driver: %+v, %v", gpus, err)
	}
	old := fakeSMI(t, `case "$1" in *compute_cap*) echo 'Field "compute_cap" is not a valid field to query.'; exit 2;; esac
echo "0, Tesla P100-PCIE-16GB, GPU-0, 16280, 16000, 1328, 715"
`)
	if gpus, err := gpusFromSMI(ctx, old); err != nil || len(gpus) != 1 || gpus[0].SMClockMHz != 1328 || gpus[0].ComputeCapability != "" {
		t.Fatalf("driver before 510: %+v, %v", gpus, err)
	}
	noDriver := fakeSMI(t, `echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."; exit 9
`)
	if gpus, err := gpusFromSMI(ctx, noDriver); err != nil || len(gpus) != 0 {
		t.Fatalf("no driver: %+v, %v; want no GPU and no error", gpus, err)
	}
	fault := fakeSMI(t, `echo "Failed to initialize NVML: Driver/library version mismatch"; exit 18
`)
	if _, err := gpusFromSMI(ctx, fault); err == nil || !strings.Contains(err.Error(), "version mismatch") {
		t.Fatalf("a driver fault: %v; want it reported", err)
	}
	if gpus, err := gpusFromSMI(ctx, filepath.Join(t.TempDir(), "nvidia-smi")); err != nil || gpus != nil {
		t.Fatalf("no tool: %+v, %v; want no GPU and no error", gpus, err)
	}
	chatty := fakeSMI(t, `yes "0, A100, GPU-x, 100, 50, 1, 1, 8.0" | head -c 1000000
`)
	if gpus, err := gpusFromSMI(ctx, chatty); len(gpus) > maxNVMLDevices || err == nil {
		t.Fatalf("a tool that never stops talking: %d GPUs, %v; want the output cut and refused", len(gpus), err)
	}
}

func FuzzParseSMI(f *testing.F) {
	f.Add([]byte(smiTwoGPUs))
	f.Add([]byte("0, A\"100, GPU-x, 100, 50, 1, 1, 8.0\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		gpus, _ := parseSMI(out, smiFields)
		if len(gpus) > maxNVMLDevices {
			t.Fatalf("%d GPUs", len(gpus))
		}
		for _, g := range gpus {
			if g.Name == "" || g.MemoryFreeBytes > g.MemoryTotalBytes || len(g.Name) > maxNVMLString || len(g.UUID) > maxNVMLString {
				t.Fatalf("GPU outside the bounds: %+v", g)
			}
		}
	})
}
