// Package cuda is the device.Backend for NVIDIA GPUs (issue 23). It loads the driver
// (libcuda.so.1) and cuBLASLt at run time through purego, with no cgo and no CUDA SDK at
// build time, and runs kernels written in CUDA C (kernels/*.cu) that `go generate` compiles
// to PTX ahead of time (with nvcc when it is installed, else clang); the PTX and a manifest
// of the sources' hashes are committed and embedded, and a test fails when the PTX is stale.
//
// Open returns a backend or an error that says what is missing (no driver, no device, a
// static binary that cannot load shared libraries, an unsupported OS). Loading the driver
// needs a dynamically linked binary: the loader is built on Linux (amd64, arm64) with cgo;
// elsewhere, and in a CGO_ENABLED=0 build (which stays static), Open only says why not.
//
// The backend computes in float32 with kernels whose every output element is reduced in
// a fixed order, so that it meets devicetest's conformance (the same bits on every call,
// a GEMM window equal to the same window of the whole product). It must not be used
// from more than one goroutine at a time, and it never falls back to the CPU silently:
// every failure is kept (CUDA's sticky error) and returned by Sync.
//
// None of this has run on a GPU yet; docs/gpu.md lists what is verified and how.
package cuda
