package speedproof

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"time"

	"github.com/meshnode/meshnode/kernels"
)

// The problem a challenge poses: a chain of Links products. X₀ is Rows×Cols and X_{l+1} =
// squash(X_l · B_{l mod Mats}), each B Cols×Cols, all drawn from the challenge's seed;
// squash(x) = x/(1+|x|) bounds every value and makes the chain non-linear, so that no
// product of the Bs can be formed ahead (and reassociation changes the bits anyway). Row i
// of the result depends on row i of X₀ and the Bs alone: a verifier recomputes a few rows
// for the price of as many rows, and compares them with the hashes the prover committed to.
//
// Each element of a product is summed by the kernels in order p in blocks of 256 (Gemm's
// contract: the order never depends on m, n or the threads), so a row computed alone has
// the bits it has in the whole product, on the same kernel path.

// Mats is how many distinct matrices B the chain cycles through.
const Mats = 4

// RowHashSize is the length of a row's hash in an answer: the first bytes of the SHA-256 of
// the row's float32 bits, little-endian.
const RowHashSize = 8

// growth is what B multiplies a row's norm by before squash: above 1, so values stay of
// order one instead of decaying towards zero.
const growth = 2

// FLOPs is what the chain costs: 2·Rows·Cols²·Links (squash not counted).
func (c Challenge) FLOPs() float64 {
	return 2 * float64(c.Rows) * float64(c.Cols) * float64(c.Cols) * float64(c.Links)
}

// operands draws X₀'s rows (rows, or all when rows is nil) and the Bs from the seed.
func (c Challenge) operands(rows []int) (x []float32, bs [][]float32) {
	rng := rand.New(rand.NewChaCha8(c.Seed))
	scale := float32(growth * math.Sqrt(3/float64(c.Cols)) / (1 << 23))
	draw := func(dst []float32) {
		for i := range dst {
			dst[i] = float32(int32(rng.Uint32())>>8) * scale // uniform in [−a, a), a = growth·√(3/Cols)
		}
	}
	bs = make([][]float32, Mats)
	for j := range bs {
		bs[j] = make([]float32, c.Cols*c.Cols)
		draw(bs[j])
	}
	full := make([]float32, c.Rows*c.Cols)
	draw(full)
	if rows == nil {
		return full, bs
	}
	x = make([]float32, len(rows)*c.Cols)
	for r, i := range rows {
		copy(x[r*c.Cols:(r+1)*c.Cols], full[i*c.Cols:(i+1)*c.Cols])
	}
	return x, bs
}

// gemmFunc is a kernel path's GEMM (kernels.Gemm, or one of kernels.GemmImpls' Serial).
type gemmFunc func(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// run computes the chain on x's rows (len(x)/Cols of them) with gemm and returns their
// hashes, RowHashSize bytes each.
func (c Challenge) run(gemm gemmFunc, x []float32, bs [][]float32) []byte {
	h, _ := c.runUntil(gemm, x, bs, time.Time{})
	return h
}

// runUntil is run that gives up (ok false) when a link ends past deadline (zero: never).
func (c Challenge) runUntil(gemm gemmFunc, x []float32, bs [][]float32, deadline time.Time) (hashes []byte, ok bool) {
	m, n := len(x)/c.Cols, c.Cols
	y := make([]float32, len(x))
	for l := 0; l < c.Links; l++ {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return nil, false
		}
		gemm(false, false, m, n, n, 1, x, n, bs[l%Mats], n, 0, y, n)
		squash(x, y)
	}
	return rowHashes(x, n), true
}

// squash sets x to y/(1+|y|), element by element.
func squash(x, y []float32) {
	x = x[:len(y)]
	for i, v := range y {
		a := v
		if a < 0 {
			a = -a
		}
		x[i] = v / (1 + a)
	}
}

func rowHashes(x []float32, n int) []byte {
	out := make([]byte, 0, len(x)/n*RowHashSize)
	row := make([]byte, 4*n)
	for i := 0; i+n <= len(x); i += n {
		for j, v := range x[i : i+n] {
			binary.LittleEndian.PutUint32(row[4*j:], math.Float32bits(v))
		}
		sum := sha256.Sum256(row)
		out = append(out, sum[:RowHashSize]...)
	}
	return out
}

// Solve computes the whole chain with the engine's GEMM on every thread, as a prover does,
// and returns the row hashes and the kernel path that computed them (kernels.GemmName).
func Solve(c Challenge) (hashes []byte, path string) {
	hashes, path, _ = SolveUntil(c, time.Time{})
	return hashes, path
}

// SolveUntil is Solve that gives up (ok false) once deadline has passed (zero: never):
// a prover stops computing an answer that would come too late to prove anything.
func SolveUntil(c Challenge, deadline time.Time) (hashes []byte, path string, ok bool) {
	x, bs := c.operands(nil)
	hashes, ok = c.runUntil(kernels.Gemm, x, bs, deadline)
	return hashes, kernels.GemmName(), ok
}

// SolveRows computes rows of the chain on the kernel path named path (one of
// kernels.GemmImpls on this machine, or one with the same bits: pathImpl) and returns
// their hashes in the order of rows; ok is false when this machine cannot run that path.
func SolveRows(c Challenge, rows []int, path string) (hashes []byte, ok bool) {
	gemm, ok := pathImpl(path)
	if !ok {
		return nil, false
	}
	x, bs := c.operands(rows)
	return c.run(gemm, x, bs), true
}

// sameBits lists the kernel paths whose GEMMs give the same bits: AVX2 and AVX-512 sum
// every element by one FMA lane in order p, in the same blocks of 256
// (TestPathsThatShareBits checks it).
var sameBits = map[string][]string{"avx512": {"avx512", "avx2"}, "avx2": {"avx2", "avx512"}}

// pathImpl finds a GEMM on this machine that gives path's bits.
func pathImpl(path string) (gemmFunc, bool) {
	names := sameBits[path]
	if names == nil {
		names = []string{path}
	}
	impls := kernels.GemmImpls()
	for _, name := range names {
		for _, impl := range impls {
			if impl.Name == name {
				return impl.Serial, true
			}
		}
	}
	return nil, false
}
