package devicetest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cpu"
	"github.com/meshnode/meshnode/device/devicetest"
)

// brokenEnv names the broken backend a child process runs the suite on.
const brokenEnv = "DEVICETEST_BROKEN"

// broken are CPU backends with one deliberate fault each, the check that must catch it,
// and what its failure must say.
var broken = map[string]struct {
	be    device.Backend
	check func(*testing.T, device.Backend)
	want  string
}{
	"write past the end":      {outOfBounds{}, devicetest.TestGelu, "outside the tensor"},
	"wrong gradient":          {wrongGrad{}, devicetest.TestGelu, "finite differences give"},
	"input written":           {writesInput{}, devicetest.TestLayerNorm, "input element 0 changed"},
	"beta 0 reads C":          {readsC{}, devicetest.TestGemm, "want"},
	"varies between calls":    {&drifting{}, devicetest.TestDeterminism, "second run"},
	"varies with the threads": {threadDependent{}, devicetest.TestDeterminism, "4 threads against 1"},
}

// TestSuiteCatchesBrokenBackends runs each broken backend's check in a child process and
// requires it to fail with the expected message: a suite that passes without the
// property it checks is worth nothing.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	if n := os.Getenv(brokenEnv); n != "" {
		b := broken[n]
		b.check(t, b.be)
		return
	}
	for n, b := range broken {
		t.Run(n, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteCatchesBrokenBackends$", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+n)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a backend that has its fault:\n%s", out)
			}
			if !strings.Contains(string(out), b.want) {
				t.Fatalf("the suite failed, but not saying %q:\n%s", b.want, out)
			}
		})
	}
}

type outOfBounds struct{ cpu.Backend }

func (outOfBounds) GeluForward(y, x device.Tensor) {
	h := y.Host()
	unsafe.Slice(&h[0], len(h)+1)[len(h)] = 0 // an index one too far, as an assembly loop's tail might
	cpu.New().GeluForward(y, x)
}

type wrongGrad struct{ cpu.Backend }

func (wrongGrad) GeluBackward(dx, x, dy device.Tensor) {
	cpu.New().GeluBackward(dx, x, dy)
	cpu.New().Scale(dx, 1.001)
}

type writesInput struct{ cpu.Backend }

func (writesInput) LayerNormForward(y, mean, rstd, x, w, b device.Tensor, rows, n int, eps float32) {
	cpu.New().LayerNormForward(y, mean, rstd, x, w, b, rows, n, eps)
	x.Host()[0]++
}

type readsC struct{ cpu.Backend }

func (readsC) Gemm(tA, tB bool, m, n, k int, alpha float32, a device.Tensor, lda int, b device.Tensor, ldb int, beta float32, c device.Tensor, ldc int) {
	if beta == 0 {
		beta = 1e-30 // 0·C, but NaN·1e-30 is NaN
	}
	cpu.New().Gemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

type drifting struct {
	cpu.Backend
	calls int
}

func (d *drifting) SumSquares(x device.Tensor) float64 {
	d.calls++
	return cpu.New().SumSquares(x) * (1 + 1e-15*float64(d.calls))
}

type threadDependent struct{ cpu.Backend }

var threads int

func (threadDependent) SetThreads(n int) { threads = n }

func (threadDependent) Scale(x device.Tensor, s float32) {
	cpu.New().Scale(x, s*(1+1e-6*float32(threads)))
}

// TestEmulatedPassesTheSuite runs the suite on tensors in (emulated) device memory, where
// every view, guard and check goes through the backend's copies.
func TestEmulatedPassesTheSuite(t *testing.T) { devicetest.Run(t, devicetest.NewEmulated()) }
