package speedproof

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Samples is how many rows a verifier recomputes: a prover that computed a fraction f of
// the rows passes with probability f^Samples (1/256 for half of them), and a wrong row is
// a lie.
const Samples = 8

// DefaultRows and DefaultCols are the chain's shape: the profile's GEMM shape
// (2048×512 by 512×512, fingerprint's default --gemm-shape), so that the chain runs at
// the rate the profile claims.
const DefaultRows, DefaultCols = 2048, 512

// ErrWrongAnswer is a prover's answer whose sampled rows do not have the hashes it sent:
// it did not compute what it answered, a lie.
var ErrWrongAnswer = errors.New("speedproof: wrong answer")

// ErrPathUnknown is an answer computed on a kernel path this machine cannot reproduce bit
// for bit: the verifier can neither accept nor refuse it.
var ErrPathUnknown = errors.New("speedproof: kernel path not reproducible here")

// Size is the challenge that takes about target at claim GFLOP/s: DefaultRows×DefaultCols,
// as many links as that needs (at least one, within MaxFLOPs), with a fresh random seed.
func Size(claimGFLOPS float64, target time.Duration) Challenge {
	c := Challenge{Rows: DefaultRows, Cols: DefaultCols, Links: 1}
	perLink := c.FLOPs()
	maxLinks := min(MaxLinks, int(MaxFLOPs/perLink))
	if want := claimGFLOPS * 1e9 * target.Seconds() / perLink; want > 1 {
		c.Links = int(min(math.Ceil(want), float64(maxLinks)))
	}
	_, _ = crand.Read(c.Seed[:]) // never fails (crypto/rand's contract since Go 1.24)
	return c
}

// Check verifies answer a to c: Samples rows, picked by pick (uniform in [0, n)) after the
// answer arrived, are recomputed on a's kernel path and must have the hashes a committed
// to. It returns ErrWrongAnswer for a lie and ErrPathUnknown when this machine cannot
// reproduce a's path. pick nil means crypto/rand.
func Check(c Challenge, a Answer, pick func(n int) int) error {
	if len(a.Hashes) != c.Rows*RowHashSize {
		return fmt.Errorf("%w: %d bytes of hashes for %d rows", ErrWrongAnswer, len(a.Hashes), c.Rows)
	}
	if pick == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:])
		pick = rand.New(rand.NewChaCha8(seed)).IntN
	}
	rows := sampleRows(c.Rows, pick)
	got, ok := SolveRows(c, rows, a.Path)
	if !ok {
		return fmt.Errorf("%w: %q", ErrPathUnknown, a.Path)
	}
	for r, i := range rows {
		if !bytes.Equal(got[r*RowHashSize:(r+1)*RowHashSize], a.Hashes[i*RowHashSize:(i+1)*RowHashSize]) {
			return fmt.Errorf("%w: row %d of %d (path %s) is not the chain's", ErrWrongAnswer, i, c.Rows, a.Path)
		}
	}
	return nil
}

// sampleRows picks Samples distinct rows of n (n ≥ Samples).
func sampleRows(n int, pick func(int) int) []int {
	seen := map[int]bool{}
	rows := make([]int, 0, Samples)
	for len(rows) < Samples {
		if i := pick(n); !seen[i] {
			seen[i] = true
			rows = append(rows, i)
		}
	}
	return rows
}

// Rate is the speed an answer proves: the chain's FLOPs over the round trip that brought
// it, in GFLOP/s. The prover cannot answer before it has computed, so this bounds its
// speed from below, whatever it claims; the round trip's network time only lowers it.
func Rate(c Challenge, roundTrip time.Duration) float64 {
	if roundTrip <= 0 {
		return 0
	}
	return c.FLOPs() / roundTrip.Seconds() / 1e9
}
