package devicetest

import (
	"testing"

	"github.com/meshnode/meshnode/device"
)

// Tests are the suite's checks by name; Run runs them all.
var Tests = []struct {
	Name string
	Fn   func(*testing.T, device.Backend)
}{
	{"Memory", TestMemory},
	{"Gemm", TestGemm},
	{"Matmul", TestMatmul},
	{"Embedding", TestEmbedding},
	{"LayerNorm", TestLayerNorm},
	{"Gelu", TestGelu},
	{"Attention", TestAttention},
	{"GroupedAttention", TestGroupedAttention},
	{"RMSNorm", TestRMSNorm},
	{"Rope", TestRope},
	{"SwiGLU", TestSwiGLU},
	{"CrossEntropy", TestCrossEntropy},
	{"Add", TestAdd},
	{"Scale", TestScale},
	{"SumSquares", TestSumSquares},
	{"AdamW", TestAdamW},
	{"Determinism", TestDeterminism},
	{"GemmWindows", TestGemmWindows},
}

// Run runs the whole conformance suite against be, one subtest per check.
func Run(t *testing.T, be device.Backend) {
	for _, c := range Tests {
		t.Run(c.Name, func(t *testing.T) { c.Fn(t, be) })
	}
}
