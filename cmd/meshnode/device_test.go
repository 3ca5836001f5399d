package main

import (
	"strings"
	"testing"

	"github.com/meshnode/meshnode/device/cuda"
)

// cudaAbsent is why CUDA cannot be opened here, or the test is skipped on a GPU machine.
func cudaAbsent(t *testing.T) string {
	t.Helper()
	b, err := cuda.Open(cuda.DefaultConfig())
	if err == nil {
		b.Close()
		t.Skip("CUDA is usable here: this checks the machine without it")
	}
	return err.Error()
}

// sameAbsence checks that stderr is the one line want, where want ends with why, the
// reason CUDA is absent: the loader's detail after "(no NVIDIA driver)" is dlerror's
// text, which another thread's dlopen (a parallel test loading NVML) can clear, so only
// the line up to the reason is compared.
func sameAbsence(t *testing.T, errOut, prefix, why string) {
	t.Helper()
	stable := why
	if i := strings.Index(why, cuda.ErrNoDriver.Error()+")"); i >= 0 {
		stable = why[:i+len(cuda.ErrNoDriver.Error())+1]
	}
	if !strings.HasPrefix(errOut, prefix+stable) || !strings.HasSuffix(errOut, "\n") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("stderr %q, want one line %q", errOut, prefix+why)
	}
}

// TestTrainDeviceCUDAWithoutDriver: --device cuda without a usable GPU exits 2 with one
// line naming what is missing, before any training.
func TestTrainDeviceCUDAWithoutDriver(t *testing.T) {
	why := cudaAbsent(t)
	code, out, errOut := runCLI(t, smallTrain(corpus(t), "--device", "cuda")...)
	if code != 2 || out != "" {
		t.Fatalf("exit %d, stdout %q; want 2 and nothing trained", code, out)
	}
	sameAbsence(t, errOut, "meshnode: --device cuda: ", why)
}

// TestTrainDeviceAutoFallsBack: --device auto without a GPU trains on the CPU and says why
// once, on stderr (stdout stays JSON).
func TestTrainDeviceAutoFallsBack(t *testing.T) {
	why := cudaAbsent(t)
	code, out, errOut := runCLI(t, smallTrain(corpus(t), "--device", "auto", "--steps", "2", "--eval-every", "0")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	sameAbsence(t, errOut, "meshnode: --device auto: training on the CPU: ", why)
	if _, done := parseTrain(t, out); done.Event != "done" {
		t.Fatalf("no done event in %q", out)
	}
}

// TestTrainDeviceFlagErrors: bad words are usage errors (exit 2) naming the flag.
func TestTrainDeviceFlagErrors(t *testing.T) {
	data := corpus(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--device", "tpu"}, `--device must be cpu, cuda or auto (got "tpu")`},
		{[]string{"--precision", "fp8"}, `--precision: must be one of auto, fp32, bf16, got "fp8"`},
		{[]string{"--precision", "bf16"}, "--precision: bf16 is not implemented yet"},
		{[]string{"--cuda-gemm", "fast"}, `--cuda-gemm: gemm must be kernel, cublaslt or cublaslt-tf32 (got "fast")`},
	} {
		code, _, errOut := runCLI(t, smallTrain(data, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", c.args, code, errOut, c.want)
		}
	}
}
