package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Benchmarks: go test -run '^$' -bench 'Gemm' ./kernels
//
// BenchmarkGemmSquare sweeps square C = A·B over every implementation (except the
// reference) with one thread and with all of Threads(); BenchmarkGemmTraining times the
// three forms a GPT's linear layers and attention use, accumulating into C. Both report
// GFLOP/s.

var benchSquareSizes = []int{128, 256, 512, 1024, 2048}

func BenchmarkGemmSquare(b *testing.B) {
	for _, impl := range GemmImpls()[1:] {
		for _, n := range benchSquareSizes {
			if impl.Name == "go" && n > 512 {
				continue
			}
			for _, threads := range []int{1, Threads()} {
				p := GemmProblem{M: n, N: n, K: n}
				b.Run(fmt.Sprintf("%s/n=%d/threads=%d", impl.Name, n, threads), func(b *testing.B) {
					benchGemm(b, impl, p, threads)
				})
				if Threads() == 1 {
					break
				}
			}
		}
	}
}

func BenchmarkGemmTraining(b *testing.B) {
	for _, impl := range GemmImpls()[2:] {
		for _, p := range GemmTrainingProblems() {
			for _, threads := range []int{1, Threads()} {
				name := fmt.Sprintf("%s/%dx%dx%d/tA=%v/tB=%v/beta=%g/threads=%d", impl.Name, p.M, p.N, p.K, p.TransA, p.TransB, p.Beta, threads)
				b.Run(name, func(b *testing.B) { benchGemm(b, impl, p, threads) })
				if Threads() == 1 {
					break
				}
			}
		}
	}
}

// BenchmarkGemmSerialSmall is attention's pattern: a tiny product with strided operands
// (a head inside a fused QKV buffer) through GemmSerial.
func BenchmarkGemmSerialSmall(b *testing.B) {
	const T, d, hd = 128, 256, 32
	rng := rand.New(rand.NewPCG(1, 1))
	qkv := make([]float32, T*3*d)
	for i := range qkv {
		qkv[i] = float32(rng.Float64() - 0.5)
	}
	s := make([]float32, T*T)
	b.SetBytes(0)
	b.ReportAllocs()
	for b.Loop() {
		GemmSerial(false, true, T, T, hd, 0.125, qkv, 3*d, qkv[d:], 3*d, 0, s, T)
	}
	b.ReportMetric(2*T*T*hd*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func benchGemm(b *testing.B, impl GemmImpl, p GemmProblem, threads int) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, bm, c := make([]float32, p.M*p.K), make([]float32, p.K*p.N), make([]float32, p.M*p.N)
	for _, x := range [][]float32{a, bm} {
		for i := range x {
			x[i] = float32(rng.Float64() - 0.5)
		}
	}
	lda, ldb := p.K, p.N
	if p.TransA {
		lda = p.M
	}
	if p.TransB {
		ldb = p.K
	}
	b.ReportAllocs()
	for b.Loop() {
		gemmThreads(impl, threads, p.TransA, p.TransB, p.M, p.N, p.K, 1, a, lda, bm, ldb, p.Beta, c, p.N)
	}
	b.ReportMetric(p.FLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
