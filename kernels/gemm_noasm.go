//go:build !amd64 || noasm

package kernels

// gemmBest is the implementation Gemm dispatches to: the portable blocked GEMM here.
var gemmBest gemmFunc = gemmGo

// archGemmImpls lists the architecture-specific GEMMs: none in this build.
func archGemmImpls() []GemmImpl { return nil }
