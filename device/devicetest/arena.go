package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// guardLen is how many guard elements sit on each side of every tensor.
const guardLen = 9

// guardBits is the guard value: a quiet NaN with a payload no arithmetic produces, so a
// write out of bounds changes its bits and a read out of bounds turns a result into NaN.
const guardBits = 0x7fc5a5a5

var guard = math.Float32frombits(guardBits)

// arena makes a test's tensors on the backend, each between guard values, and checks after
// the operation that the guards, and the inputs, are untouched.
type arena struct {
	t    *testing.T
	be   device.Backend
	bufs []*guarded
}

type guarded struct {
	name  string
	full  device.Tensor // guards, elements, guards
	want  []float32     // the elements an input must still hold; nil for an output
	inner device.Tensor
}

func newArena(t *testing.T, be device.Backend) *arena { return &arena{t: t, be: be} }

// put copies x into a new guarded tensor of the backend.
func (a *arena) put(name string, x []float32, input bool) device.Tensor {
	host := make([]float32, len(x)+2*guardLen)
	for i := range host {
		host[i] = guard
	}
	copy(host[guardLen:], x)
	full := a.be.Alloc(len(host), device.F32)
	a.be.CopyFromHost(full, host)
	g := &guarded{name: name, full: full, inner: full.Slice(guardLen, guardLen+len(x))}
	if input {
		g.want = append([]float32(nil), x...)
	}
	a.bufs = append(a.bufs, g)
	return g.inner
}

// in is an input tensor holding x; the operation must not change it.
func (a *arena) in(name string, x []float32) device.Tensor { return a.put(name, x, true) }

// out is an output tensor holding x before the operation (its prior contents).
func (a *arena) out(name string, x []float32) device.Tensor { return a.put(name, x, false) }

// get copies t's elements to the host.
func (a *arena) get(t device.Tensor) []float32 {
	h := make([]float32, t.Len())
	a.be.CopyToHost(h, t)
	return h
}

// check fails the test if a guard changed or an input was written.
func (a *arena) check() {
	a.t.Helper()
	if err := a.be.Sync(); err != nil {
		a.t.Fatalf("Sync: %v", err)
	}
	for _, g := range a.bufs {
		host := a.get(g.full)
		for i, v := range host {
			inGuard := i < guardLen || i >= len(host)-guardLen
			if inGuard && math.Float32bits(v) != guardBits {
				a.t.Fatalf("%s: element %d outside the tensor (of %d) was written: %v", g.name, i-guardLen, len(host)-2*guardLen, v)
			}
			if !inGuard && g.want != nil && math.Float32bits(v) != math.Float32bits(g.want[i-guardLen]) {
				a.t.Fatalf("%s: input element %d changed from %v to %v", g.name, i-guardLen, g.want[i-guardLen], v)
			}
		}
	}
}

// randn returns n float32 values, normal with standard deviation std, from rng.
func randn(rng *rand.Rand, n int, std float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * std)
	}
	return x
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func tokens(rng *rand.Rand, n, V int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(rng.IntN(V))
	}
	return t
}

// closeTo fails t where |got − want| > tol·max(1, |want|), naming the first element.
func closeTo(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range want {
		g := float64(got[i])
		if d := math.Abs(g - want[i]); !(d <= tol*math.Max(1, math.Abs(want[i]))) {
			t.Fatalf("%s[%d] = %v, want %v (|Δ| %.3g > tol %.3g)", what, i, g, want[i], d, tol)
		}
	}
}

// sameBits fails t unless got and want are the same bits.
func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v (%#x), want %v (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// fdPoints is the most coordinates of one input a gradient check perturbs.
const fdPoints = 24

// fdStep is the central-difference step; the reference is float64, so its truncation
// (~h²) and rounding (~1e-16/h) errors are both far below float32's.
const fdStep = 1e-4

// checkGradient compares grad, a backend's gradient of L(x) = Σ_j r_j·f(x)_j, with central
// differences of the float64 reference f at up to fdPoints coordinates of x (all when x
// is small), within tol·max(1, |numeric|).
func checkGradient(t *testing.T, what string, x []float64, f func(x []float64) []float64, r []float64, grad []float32, tol float64) {
	t.Helper()
	loss := func() float64 {
		var s float64
		for j, v := range f(x) {
			s += r[j] * v
		}
		return s
	}
	idx := make([]int, 0, fdPoints)
	if len(x) <= fdPoints {
		for i := range x {
			idx = append(idx, i)
		}
	} else {
		rng := rand.New(rand.NewPCG(uint64(len(x)), 7))
		for range fdPoints {
			idx = append(idx, rng.IntN(len(x)))
		}
	}
	for _, i := range idx {
		keep := x[i]
		x[i] = keep + fdStep
		up := loss()
		x[i] = keep - fdStep
		down := loss()
		x[i] = keep
		num := (up - down) / (2 * fdStep)
		if d := math.Abs(float64(grad[i]) - num); !(d <= tol*math.Max(1, math.Abs(num))) {
			t.Fatalf("%s[%d] = %v, finite differences give %v (|Δ| %.3g > tol %.3g)", what, i, grad[i], num, d, tol)
		}
	}
}

// minus returns a − b elementwise (a gradient accumulated onto b).
func minus(a, b []float32) []float32 {
	d := make([]float32, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

func name(format string, args ...any) string { return fmt.Sprintf(format, args...) }
