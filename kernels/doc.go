// Package kernels holds meshnode's tensors and compute: GEMM in the three forms training
// needs, and the elementwise, normalisation, attention, loss and optimiser operations of a
// GPT, each with its backward.
//
// Every operation has a pure-Go reference whose doc comment is its specification; where
// speed matters there is a fast path (cache-blocked, parallel over goroutines, and SIMD
// assembly behind `//go:build amd64 && !noasm` with runtime CPU dispatch). All data is
// float32, row-major, in plain slices with explicit leading dimensions, so that views into
// larger buffers (a head of a fused QKV projection) need no copies.
//
// Results do not depend on the number of threads: parallel splits only partition outputs,
// never a reduction, so a run with GOMAXPROCS=1 and one with 2 produce the same bits.
//
// The package imports nothing of meshnode's and does no I/O.
package kernels
