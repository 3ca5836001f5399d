//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cpu"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// openOrSkip opens the backend with cfg or skips the test saying why there is none.
func openOrSkip(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := Open(cfg)
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// bf16Round is round-to-nearest-even to bfloat16, as f32_to_bf16 computes it.
func bf16Round(x float32) float32 {
	u := math.Float32bits(x)
	u += 0x7fff + (u>>16)&1
	return math.Float32frombits(u &^ 0xffff)
}

// TestBF16CopyRoundTrip: float32 → bf16 on the device rounds to nearest even; back is exact.
func TestBF16CopyRoundTrip(t *testing.T) {
	b := openOrSkip(t, DefaultConfig())
	x := []float32{1, -2.5, 3.1415927, 1e-3, 65504, 1.00390625, 1.01171875, -0}
	d := b.Alloc(len(x), device.BF16)
	b.CopyFromHost(d, x)
	got := make([]float32, len(x))
	b.CopyToHost(got, d)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range x {
		if got[i] != bf16Round(x[i]) {
			t.Errorf("x[%d] = %v: bf16 gives %v, want %v", i, x[i], got[i], bf16Round(x[i]))
		}
	}
}

// TestBF16Gemm: bf16 A and B through cuBLASLt against a float64 product of the rounded
// inputs.
func TestBF16Gemm(t *testing.T) {
	b := openOrSkip(t, DefaultConfig())
	if b.lt == nil {
		t.Skipf("no cuBLASLt: %v", b.ltErr)
	}
	rng := rand.New(rand.NewPCG(3, 1))
	m, n, k := 37, 29, 64
	a, bm := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(rng.NormFloat64())
	}
	for i := range bm {
		bm[i] = float32(rng.NormFloat64())
	}
	da, db, dc := b.Alloc(m*k, device.BF16), b.Alloc(k*n, device.BF16), b.Alloc(m*n, device.F32)
	b.CopyFromHost(da, a)
	b.CopyFromHost(db, bm)
	b.Gemm(false, false, m, n, k, 1, da, k, db, n, 0, dc, n)
	got := make([]float32, m*n)
	b.CopyToHost(got, dc)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range m {
		for j := range n {
			var want float64
			for q := range k {
				want += float64(bf16Round(a[i*k+q])) * float64(bf16Round(bm[q*n+j]))
			}
			if d := math.Abs(float64(got[i*n+j]) - want); d > 1e-4*float64(k) {
				t.Fatalf("c[%d][%d] = %v, want %v", i, j, got[i*n+j], want)
			}
		}
	}
}

// TestCublasLtGemmMatchesTheKernel: the fp32 cuBLASLt path computes the kernel's product
// to float32 rounding, for every transpose form.
func TestCublasLtGemmMatchesTheKernel(t *testing.T) {
	k := openOrSkip(t, DefaultConfig())
	lt := openOrSkip(t, Config{GEMM: GemmCublasLt})
	rng := rand.New(rand.NewPCG(4, 1))
	m, n, kk := 70, 45, 130
	for form := range 4 {
		tA, tB := form&1 != 0, form&2 != 0
		a, bm, c := make([]float32, m*kk), make([]float32, kk*n), make([]float32, m*n)
		for _, s := range [][]float32{a, bm, c} {
			for i := range s {
				s[i] = float32(rng.NormFloat64())
			}
		}
		lda, ldb := kk, n
		if tA {
			lda = m
		}
		if tB {
			ldb = kk
		}
		run := func(b *Backend) []float32 {
			cc := append([]float32(nil), c...)
			b.Gemm(tA, tB, m, n, kk, 0.5, device.Host(a), lda, device.Host(bm), ldb, 0.25, device.Host(cc), n)
			if err := b.Sync(); err != nil {
				t.Fatal(err)
			}
			return cc
		}
		want, got := run(k), run(lt)
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*float64(kk) {
				t.Fatalf("tA=%v tB=%v: c[%d] = %v with cuBLASLt, %v with the kernel", tA, tB, i, got[i], want[i])
			}
		}
	}
}

// TestTrainsLikeTheCPU trains a small GPT for 20 steps on the GPU (parameters in host
// memory, activations on the device) and on the CPU: the losses agree to 1e-4.
func TestTrainsLikeTheCPU(t *testing.T) {
	b := openOrSkip(t, DefaultConfig())
	cfg := parallel.DefaultTrainConfig()
	cfg.Model = model.Config{Vocab: 256, Context: 64, Layers: 2, DModel: 64, Heads: 4}
	cfg.Batch, cfg.MicroBatches, cfg.Steps, cfg.Warmup = 4, 1, 20, 3
	data, err := model.LoadDataset(cfg.Data, cfg.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	losses := func(be device.Backend) []float64 {
		cfg.Backend = be
		tr, err := parallel.NewTrainer(cfg, data)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		var out []float64
		for range cfg.Steps {
			l, err := tr.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, l)
		}
		return out
	}
	want, got := losses(cpu.New()), losses(b)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-4 {
			t.Fatalf("step %d: loss %v on %s, %v on the CPU", i+1, got[i], b.Name(), want[i])
		}
	}
	t.Logf("20 steps: last loss %v on %s, %v on the CPU", got[len(got)-1], b.Name(), want[len(want)-1])
}
