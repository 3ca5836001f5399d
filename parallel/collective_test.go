package parallel

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
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

// equivocator sends its contribution times s to one peer (to) only, inside every bound.
type equivocator struct {
	Transport
	to string
	s  float32
}

func (e equivocator) Send(ctx context.Context, to string, f *frame.Frame) error {
	return alteringSend(ctx, e.Transport, to, f, e.AlterContribution)
}

func (e equivocator) AlterContribution(_ context.Context, to string, f *frame.Frame) (*frame.Frame, error) {
	if to == e.to && f.Kind == frame.KindReduce && f.DType == frame.DTypeF32 {
		x := make([]float32, f.Shape[0])
		if err := decodeF32(x, f.Payload); err != nil {
			return nil, err
		}
		for i := range x {
			x[i] *= e.s
		}
		g := *f
		g.Payload = appendF32(nil, x)
		f = &g
	}
	return f, nil
}

// TestMembersConfirmTheyEndWithTheSameBits: a member that sends a slightly different
// contribution to one peer than to the other leaves them with different bits, and both
// honest members report the mismatch; with every member honest none is reported.
func TestMembersConfirmTheyEndWithTheSameBits(t *testing.T) {
	for _, lie := range []bool{false, true} {
		names := []string{"r0", "r1", "r2"}
		net := NewInMemory(names...)
		var mu sync.Mutex
		var reports []Rejection
		pol := policy{rule: jobspec.AggregateMean, reject: func(r Rejection) { mu.Lock(); reports = append(reports, r); mu.Unlock() }}
		var wg sync.WaitGroup
		for m := range 3 {
			var tr Transport = net.Peer(names[m])
			if lie && m == 2 {
				tr = equivocator{Transport: tr, to: "r0", s: 1.001}
			}
			x := []float32{float32(m) + 1, 2, 3, float32(m)}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := allReduceMean(context.Background(), tr, Group{Members: names, Self: m}, roundKey{job: 1}, x, nil, pol); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		net.Close()
		mismatches := 0
		for _, r := range reports {
			if strings.Contains(r.Reason, "different bits") {
				mismatches++
			}
		}
		if lie && mismatches == 0 {
			t.Errorf("an equivocating member went unreported: %+v", reports)
		}
		if !lie && len(reports) != 0 {
			t.Errorf("honest members reported %+v", reports)
		}
		t.Logf("equivocation %v: %d mismatch reports", lie, mismatches)
	}
}
