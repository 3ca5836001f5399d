//go:build amd64 && !noasm

package kernels

import (
	"math/rand/v2"
	"testing"
)

// TestPackBSIMDMatchesPackB holds the SIMD packs of op(B) (AVX2 for 16-column panels,
// AVX-512 for 32) to the portable packB, for both forms and k lengths around the 8- and
// 16-step blocks of the transposing packs.
func TestPackBSIMDMatchesPackB(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, nr := range []int{16, 32} {
		if (nr == 16 && !hasAVX2) || (nr == 32 && !hasAVX512) {
			continue
		}
		for _, tB := range []bool{false, true} {
			for _, kc := range []int{1, 7, 8, 9, 16, 23, 64, 256} {
				for _, nc := range []int{nr, 3*nr + 5} {
					ldb := max(kc, nc) + 3
					b := randSlice(rng, (max(kc, nc)+2)*ldb, 1)
					want, got := make([]float32, kc*roundUp(nc, nr)), make([]float32, kc*roundUp(nc, nr))
					packB(tB, b, ldb, 1, 2, kc, nc, nr, want)
					packBSIMD(tB, b, ldb, 1, 2, kc, nc, nr, got)
					for i := range want {
						if got[i] != want[i] {
							t.Fatalf("nr=%d tB=%v kc=%d nc=%d: element %d is %g, want %g", nr, tB, kc, nc, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
