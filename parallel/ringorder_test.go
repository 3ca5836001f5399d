package parallel

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestRingOrderMeanHasTheRingsBits: ringOrderMean over every member's contribution gives
// the bits of the ring all-reduce (then 1/R), for group sizes with even and uneven chunks.
func TestRingOrderMeanHasTheRingsBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, R := range []int{2, 3, 4, 5} {
		names := make([]string, R)
		all := make([][]float32, R)
		for m := range R {
			names[m] = string(rune('a' + m))
			all[m] = make([]float32, 1001)
			for i := range all[m] {
				all[m][i] = rng.Float32()*2 - 1
			}
		}
		net := NewInMemory(names...)
		outs := make([][]float32, R)
		var wg sync.WaitGroup
		for m := range R {
			outs[m] = slices.Clone(all[m])
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := ringAllReduce(context.Background(), net.Peer(names[m]), Group{Members: names, Self: m}, roundKey{job: 1}, outs[m]); err != nil {
					t.Error(err)
				}
				inv := 1 / float32(R)
				for i := range outs[m] {
					outs[m][i] *= inv
				}
			}()
		}
		wg.Wait()
		net.Close()
		got := make([]float32, 1001)
		ringOrderMean(got, all)
		for m := range R {
			if !slices.Equal(got, outs[m]) {
				t.Errorf("R=%d: member %d's ring mean differs from ringOrderMean", R, m)
			}
		}
	}
}
