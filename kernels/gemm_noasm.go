//go:build !amd64 || noasm

package kernels

// archGemmImpls lists the architecture-specific GEMMs: none in this build, so Gemm
// dispatches to the portable blocked GEMM.
func archGemmImpls() []GemmImpl { return nil }
