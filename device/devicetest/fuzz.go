package devicetest

import (
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/device"
)

// FuzzGemm compares be's Gemm with the reference on shapes (m, n up to 64, k up to 300),
// transposition forms and betas the fuzzer picks, with padded strides and guards as in
// TestGemm. A backend's test wraps it:
//
//	func FuzzGemm(f *testing.F) { devicetest.FuzzGemm(f, cpu.New()) }
func FuzzGemm(f *testing.F, be device.Backend) {
	f.Add(uint8(7), uint8(5), uint16(13), uint8(0), uint8(0), uint64(1))
	f.Add(uint8(1), uint8(1), uint16(1), uint8(3), uint8(1), uint64(2))
	f.Add(uint8(33), uint8(47), uint16(257), uint8(2), uint8(2), uint64(3))
	f.Fuzz(func(t *testing.T, m, n uint8, k uint16, form, betaSel uint8, seed uint64) {
		M, N, K := int(m%64)+1, int(n%64)+1, int(k%300)+1
		beta := []float32{0, 0.5, 1, -1}[betaSel%4]
		gemmCase(t, be, rand.New(rand.NewPCG(seed, 3)), form&1 != 0, form&2 != 0, M, N, K, -0.75, beta)
	})
}
