//go:build amd64 && !noasm

package kernels

// gemmBest is the implementation Gemm dispatches to. The SIMD microkernels replace it at
// start-up when the CPU supports them.
var gemmBest gemmFunc = gemmGo

// archGemmImpls lists the amd64 SIMD GEMMs this CPU can run.
func archGemmImpls() []GemmImpl { return nil }
