//go:build !amd64 || noasm

package kernels

// archVecImpls lists the SIMD vector kernels: none in this build.
func archVecImpls() []vecImpl { return nil }
