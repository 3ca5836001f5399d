package cuda

import "fmt"

// GEMM paths: how Backend.Gemm and the matmuls compute.
const (
	// GemmKernel is the backend's own tiled kernel (kernels/gemm.cu): float32, each element
	// summed over k in order, so results do not depend on m, n or the device's occupancy.
	// It meets devicetest's conformance, and it is slow next to cuBLAS.
	GemmKernel = "kernel"
	// GemmCublasLt is cuBLASLt with CUBLAS_COMPUTE_32F: float32, fast, but its algorithm
	// (and so the bits) may change with the shape, so a window of C need not equal the
	// same window of the whole product.
	GemmCublasLt = "cublaslt"
	// GemmCublasLtTF32 is cuBLASLt with TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32):
	// inputs rounded to 10 mantissa bits, about 1e-3 relative error.
	GemmCublasLtTF32 = "cublaslt-tf32"
)

// Config chooses the device and the GEMM path.
type Config struct {
	// Ordinal is the CUDA device index (CUDA_VISIBLE_DEVICES applies first); 0 is the
	// first device.
	Ordinal int
	// GEMM is GemmKernel, GemmCublasLt or GemmCublasLtTF32; "" is GemmKernel. GEMMs of
	// bf16 inputs always go to cuBLASLt.
	GEMM string
}

// DefaultConfig is device 0 with the deterministic GEMM kernel.
func DefaultConfig() Config { return Config{GEMM: GemmKernel} }

// Validate reports a field out of range, naming it.
func (c Config) Validate() error {
	if c.Ordinal < 0 {
		return fmt.Errorf("cuda: device ordinal must be ≥ 0 (got %d)", c.Ordinal)
	}
	switch c.GEMM {
	case "", GemmKernel, GemmCublasLt, GemmCublasLtTF32:
		return nil
	}
	return fmt.Errorf("cuda: gemm must be %s, %s or %s (got %q)", GemmKernel, GemmCublasLt, GemmCublasLtTF32, c.GEMM)
}
