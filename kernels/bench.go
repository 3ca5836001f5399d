package kernels

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// GemmProblem is one GEMM to time: C (m×n) = op(A)·op(B) when Beta is 0, or
// C = op(A)·op(B) + Beta·C, with tightly packed operands (leading dimension = columns).
type GemmProblem struct {
	TransA, TransB bool
	M, N, K        int
	Beta           float32
}

// FLOPs is the floating-point work of one product, 2·m·n·k.
func (p GemmProblem) FLOPs() float64 { return 2 * float64(p.M) * float64(p.N) * float64(p.K) }

// Form names the product without its sizes: "A·B", "Aᵀ·B", "A·Bᵀ" or "Aᵀ·Bᵀ", followed by
// " +=" when it accumulates into C (Beta 1) or "+β·C" for another nonzero Beta.
func (p GemmProblem) Form() string {
	a, b := "A", "B"
	if p.TransA {
		a = "Aᵀ"
	}
	if p.TransB {
		b = "Bᵀ"
	}
	switch p.Beta {
	case 0:
		return a + "·" + b
	case 1:
		return a + "·" + b + " +="
	}
	return a + "·" + b + "+β·C"
}

// String names the product, e.g. "512x512x512 A·Bᵀ +=".
func (p GemmProblem) String() string { return fmt.Sprintf("%dx%dx%d %s", p.M, p.N, p.K, p.Form()) }

// GemmTrainingProblems are the products one GPT block runs on a CPU node, the shapes the
// device profile and `meshnode bench --training-shapes` time: linear layers with d = 128,
// 256 and 1024 on micro-batches of 2048 and 512 tokens in their three forms (forward
// Y = X·W, input gradient dX += dY·Wᵀ, weight gradient dW += Xᵀ·dY), and attention's
// per-head 128×128×32 products (S = Q·Kᵀ, O += P·V).
func GemmTrainingProblems() []GemmProblem {
	var ps []GemmProblem
	for _, s := range [][2]int{{2048, 128}, {2048, 256}, {512, 1024}} {
		tokens, d := s[0], s[1]
		ps = append(ps,
			GemmProblem{M: tokens, N: 3 * d, K: d},                        // QKV projection
			GemmProblem{M: tokens, N: 4 * d, K: d},                        // MLP up
			GemmProblem{M: tokens, N: d, K: 4 * d, TransB: true, Beta: 1}, // dX of MLP up
			GemmProblem{M: d, N: 4 * d, K: tokens, TransA: true, Beta: 1}, // dW of MLP up
		)
	}
	return append(ps,
		GemmProblem{M: 128, N: 128, K: 32, TransB: true},
		GemmProblem{M: 128, N: 32, K: 128, Beta: 1},
	)
}

// MeasureGemm times Gemm's kernel on a square-style product C = A·B (m×k times k×n, beta
// 0) over threads goroutines and returns GFLOP/s, measured as the OpenBLAS baseline of
// docs/PERFORMANCE.md is: one warm-up call, then three batches of at least minDuration
// each, the median batch, 2·m·n·k floating-point operations per product. It is the measurement behind `meshnode bench --gemm` and the node's
// device profile.
func MeasureGemm(m, n, k, threads int, minDuration time.Duration) float64 {
	return MeasureGemmImpl(gemmBestImpl, GemmProblem{M: m, N: n, K: k}, threads, minDuration)
}

// MeasureGemmImpl is MeasureGemm for any problem and implementation (one of GemmImpls()).
// threads ≤ 0 means Threads(). Inputs are uniform in [-0.5, 0.5) from a fixed seed.
func MeasureGemmImpl(impl GemmImpl, p GemmProblem, threads int, minDuration time.Duration) float64 {
	if threads <= 0 {
		threads = Threads()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	fill := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.Float64() - 0.5)
		}
		return x
	}
	a, b, c := fill(p.M*p.K), fill(p.K*p.N), make([]float32, p.M*p.N)
	lda, ldb := p.K, p.N
	if p.TransA {
		lda = p.M
	}
	if p.TransB {
		ldb = p.K
	}
	run := func() {
		checkGemm(p.TransA, p.TransB, p.M, p.N, p.K, a, lda, b, ldb, c, p.N)
		gemmThreads(impl, threads, p.TransA, p.TransB, p.M, p.N, p.K, 1, a, lda, b, ldb, p.Beta, c, p.N)
	}
	run()
	var rates [3]float64
	for i := range rates {
		reps, start := 0, time.Now()
		var elapsed time.Duration
		for elapsed < minDuration || reps == 0 {
			run()
			reps++
			elapsed = time.Since(start)
		}
		rates[i] = p.FLOPs() * float64(reps) / elapsed.Seconds() / 1e9
	}
	slices.Sort(rates[:])
	return rates[1]
}
