package kernels

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkLayerNorm times LayerNorm forward and backward on one micro-batch of the
// default model (2048 tokens × d 128), on one thread.
func BenchmarkLayerNorm(b *testing.B) {
	SetThreads(1)
	defer SetThreads(0)
	rng := rand.New(rand.NewPCG(1, 2))
	rows, n := 2048, 128
	x, dy := randSlice(rng, rows*n, 1), randSlice(rng, rows*n, 1)
	w, bias := randSlice(rng, n, 1), randSlice(rng, n, 1)
	y, dx := make([]float32, rows*n), make([]float32, rows*n)
	mean, rstd, dw, db := make([]float32, rows), make([]float32, rows), make([]float32, n), make([]float32, n)
	for b.Loop() {
		LayerNormForward(y, mean, rstd, x, w, bias, rows, n, LayerNormEps)
		LayerNormBackward(dx, dw, db, dy, x, mean, rstd, w, rows, n)
	}
}

// BenchmarkGelu times GELU forward and backward over 2048 tokens × 512 (the default
// model's MLP), on one thread, on the dispatched vector path.
func BenchmarkGelu(b *testing.B) {
	SetThreads(1)
	defer SetThreads(0)
	rng := rand.New(rand.NewPCG(3, 4))
	x, dy := randSlice(rng, 2048*512, 3), randSlice(rng, 2048*512, 1)
	y := make([]float32, len(x))
	for b.Loop() {
		GeluForward(y, x)
		GeluBackward(y, x, dy)
	}
}

// BenchmarkSwiGLU times SwiGLU forward and backward over 2048 tokens × 1408 (a Llama MLP
// of d 512), on one thread, on the dispatched vector path:
//
//	go test ./kernels -run X -bench SwiGLU -count 6
func BenchmarkSwiGLU(b *testing.B) {
	SetThreads(1)
	defer SetThreads(0)
	rng := rand.New(rand.NewPCG(5, 6))
	gate, up, dh := randSlice(rng, 2048*1408, 4), randSlice(rng, 2048*1408, 1), randSlice(rng, 2048*1408, 1)
	h, dg, du := make([]float32, len(gate)), make([]float32, len(gate)), make([]float32, len(gate))
	for b.Loop() {
		SwiGLUForward(h, gate, up)
		SwiGLUBackward(dg, du, gate, up, dh)
	}
}
