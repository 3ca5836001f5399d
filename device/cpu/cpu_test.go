package cpu_test

import (
	"testing"

	"github.com/meshnode/meshnode/device/cpu"
	"github.com/meshnode/meshnode/device/devicetest"
)

// TestConformance runs the device layer's conformance suite on the CPU backend (and, under
// -tags noasm or MESHNODE_CPU=generic|avx2, on the path that build or cap selects).
func TestConformance(t *testing.T) { devicetest.Run(t, cpu.New()) }

// FuzzGemm fuzzes the CPU backend's GEMM against the suite's reference:
//
//	go test ./device/cpu -run '^$' -fuzz FuzzGemm -fuzztime 30s
func FuzzGemm(f *testing.F) { devicetest.FuzzGemm(f, cpu.New()) }
