package speedproof

import (
	"bytes"
	"math"
	"testing"
	"time"

	"github.com/meshnode/meshnode/kernels"
)

func testChallenge(links int) Challenge {
	c := Challenge{Rows: 64, Cols: 128, Links: links}
	for i := range c.Seed {
		c.Seed[i] = byte(i * 7)
	}
	return c
}

// TestRowsAloneHaveTheWholeChainsBits: the verifier's rows, computed alone on one thread,
// have the bits of the prover's whole threaded chain, on every kernel path of this machine.
func TestRowsAloneHaveTheWholeChainsBits(t *testing.T) {
	c := testChallenge(2)
	c.Rows, c.Cols = DefaultRows, DefaultCols
	whole, path := Solve(c)
	if len(whole) != c.Rows*RowHashSize || path != kernels.GemmName() {
		t.Fatalf("Solve: %d bytes on %q", len(whole), path)
	}
	rows := []int{0, 5, 17, 63, 31, 2, 40, 8}
	for _, impl := range kernels.GemmImpls() {
		if impl.Name == "ref" {
			continue // sums without FMA: another path, never a prover's
		}
		got, ok := SolveRows(c, rows, impl.Name)
		if !ok {
			t.Fatalf("path %s of this machine not found", impl.Name)
		}
		x, bs := c.operands(nil)
		all := c.run(impl.Serial, x, bs)
		for r, i := range rows {
			if !bytes.Equal(got[r*RowHashSize:(r+1)*RowHashSize], all[i*RowHashSize:(i+1)*RowHashSize]) {
				t.Fatalf("%s: row %d alone differs from the whole chain's", impl.Name, i)
			}
		}
	}
}

// TestPathsThatShareBits: the paths sameBits declares identical give the same chain (the
// verifier reproduces an AVX-512 prover on an AVX2 machine), and the portable Go path does
// not (so an answer is always checked on its own path).
func TestPathsThatShareBits(t *testing.T) {
	c := testChallenge(20)
	byPath := map[string][]byte{}
	for _, impl := range kernels.GemmImpls() {
		x, bs := c.operands(nil)
		byPath[impl.Name] = c.run(impl.Serial, x, bs)
	}
	if byPath["avx512"] == nil || byPath["avx2"] == nil {
		t.Skipf("this machine lacks AVX-512 or AVX2 (paths %v)", kernels.GemmImpls())
	}
	if !bytes.Equal(byPath["avx512"], byPath["avx2"]) {
		t.Fatal("AVX-512 and AVX2 chains differ: sameBits is wrong")
	}
	if bytes.Equal(byPath["go"], byPath["avx2"]) {
		t.Log("the Go path happens to match the FMA paths on this challenge")
	}
}

// TestChainStaysFinite: squash keeps every value of a long chain finite and away from
// zero (a chain that decays to zeros would have every row hash alike).
func TestChainStaysFinite(t *testing.T) {
	c := testChallenge(200)
	x, bs := c.operands(nil)
	c.run(kernels.Gemm, x, bs)
	var sum float64
	for _, v := range x {
		if math.IsNaN(float64(v)) || math.Abs(float64(v)) >= 1 {
			t.Fatalf("value %v after %d links", v, c.Links)
		}
		sum += math.Abs(float64(v))
	}
	if mean := sum / float64(len(x)); mean < 0.05 {
		t.Fatalf("mean |x| %.3g after %d links: the chain decays", mean, c.Links)
	}
}

// TestSolveGivesUpPastItsDeadline: a prover stops computing an answer that would come after
// the verifier stopped waiting.
func TestSolveGivesUpPastItsDeadline(t *testing.T) {
	if _, _, ok := SolveUntil(testChallenge(3), time.Now().Add(-time.Second)); ok {
		t.Fatal("solved past the deadline")
	}
	if h, _, ok := SolveUntil(testChallenge(3), time.Time{}); !ok || len(h) == 0 {
		t.Fatal("no deadline, no answer")
	}
}
