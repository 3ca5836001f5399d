package speedproof

import (
	"testing"
	"time"

	"github.com/meshnode/meshnode/kernels"
)

// BenchmarkSolve is what a prover pays for a challenge of the default shape, against the
// GEMM rate the profile would claim (go test ./node/speedproof -run X -bench Solve).
func BenchmarkSolve(b *testing.B) {
	c := Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 20}
	claim := kernels.MeasureGemm(DefaultRows, DefaultCols, DefaultCols, 0, 200*time.Millisecond)
	b.ResetTimer()
	for b.Loop() {
		Solve(c)
	}
	b.ReportMetric(c.FLOPs()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	b.ReportMetric(claim, "claim-GFLOP/s")
}

// BenchmarkCheck is what a verifier pays to check an answer to the same challenge.
func BenchmarkCheck(b *testing.B) {
	c := Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 20}
	hashes, path := Solve(c)
	b.ResetTimer()
	for b.Loop() {
		if err := Check(c, Answer{Path: path, Hashes: hashes}, nil); err != nil {
			b.Fatal(err)
		}
	}
}
