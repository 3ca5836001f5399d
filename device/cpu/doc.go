// Package cpu is the device layer's CPU backend: device.Backend implemented by the
// kernels package's operations (blocked, threaded GEMM with AVX-512/AVX2 microkernels,
// pure Go under -tags noasm, and the GPT ops with their backward passes). Every method is
// one kernels call, or the same sequence of calls the model made before the device layer
// existed, so results are bit-identical to calling kernels directly.
//
// Its tensors are host tensors (device.Host): views and host copies cost nothing beyond
// a memmove. It must not do anything the kernels do not: no I/O, no state of its own
// beyond the kernels' global thread limit (SetThreads).
package cpu
