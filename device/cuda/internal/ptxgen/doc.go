// Package ptxgen compiles the CUDA backend's kernels (device/cuda/kernels/*.cu) to PTX and
// keeps the manifest that ties each PTX file to the sources it was compiled from (their
// SHA-256), the compiler and its version and the target architecture. It runs at
// `go generate` time, never in the engine; device/cuda's tests use it to fail on stale PTX.
// It must not need a GPU or the CUDA SDK: clang compiles CUDA to PTX without either.
package ptxgen
