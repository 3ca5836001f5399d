// Command ptxgen compiles device/cuda/kernels/*.cu to PTX and writes their manifest (each
// source's SHA-256, the compiler and its version, the flags and the architecture); it is
// what `go generate ./device/cuda` runs. MESHNODE_PTX_COMPILER=nvcc|clang picks the
// compiler (default: nvcc when installed, else clang). device/cuda's tests fail when the
// committed PTX is older than its sources (docs/gpu.md).
package main
