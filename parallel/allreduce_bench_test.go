package parallel

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// BenchmarkAllReduce times one allReduceMean of 1 Mi float32 (4 MiB) across R in-memory
// members, by rule, and reports the payload bytes each member sends (reduce and scalar
// frames): the cost of the checked, gathered path against the ring. The pieces=1MiB runs
// cut every message into pieces of 1 MiB (4 a contribution; PieceBytes is 32 MiB), the
// cost of sending a message in pieces.
//
//	go test ./parallel -run '^$' -bench AllReduce -benchtime 20x -count 3
func BenchmarkAllReduce(b *testing.B) {
	const n = 1 << 20
	for _, R := range []int{3, 4} {
		for _, rule := range []jobspec.Aggregate{jobspec.AggregateMean, jobspec.AggregateCenteredClip} {
			if !rule.Valid() {
				continue
			}
			for _, piece := range []int{0, 1 << 20} {
				benchAllReduce(b, R, n, rule, piece)
			}
		}
	}
}

func benchAllReduce(b *testing.B, R, n int, rule jobspec.Aggregate, piece int) {
	name := fmt.Sprintf("R=%d/%s", R, rule)
	if piece > 0 {
		name += fmt.Sprintf("/pieces=%dMiB", piece>>20)
	}
	b.Run(name, func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		names := make([]string, R)
		in := make([][]float32, R)
		for m := range R {
			names[m] = fmt.Sprintf("m%d", m)
			in[m] = make([]float32, n)
			for i := range in[m] {
				in[m][i] = float32(rng.NormFloat64())
			}
		}
		net := NewInMemory(names...)
		b.Cleanup(net.Close)
		net.SetMaxPayload(piece)
		pol := policy{rule: rule}
		step := uint32(0)
		b.ResetTimer()
		for range b.N {
			step++
			var wg sync.WaitGroup
			for m := range R {
				x := slices.Clone(in[m])
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := allReduceMean(context.Background(), net.Peer(names[m]), Group{Members: names, Self: m}, roundKey{job: 1, step: step}, x, nil, pol); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
		}
		sent := net.SentBytes(frame.KindReduce) + net.SentBytes(frame.KindScalar)
		b.ReportMetric(float64(sent)/float64(b.N*R), "B/member")
	})
}

// BenchmarkReduceScatter times ZeRO's reduce-scatter of 1 Mi float32 (4 MiB) across R
// in-memory members: the ring (each member relays partial sums) against the direct one
// that replaced it (each chunk straight to its owner), and reports the payload bytes each
// member sends (the same).
//
//	go test ./parallel -run '^$' -bench 'ReduceScatter|PullApart' -benchtime 20x -count 3
func BenchmarkReduceScatter(b *testing.B) {
	const n = 1 << 20
	for _, R := range []int{3, 4} {
		for _, way := range []string{"ring", "direct"} {
			b.Run(fmt.Sprintf("R=%d/%s", R, way), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(1, 2))
				names := make([]string, R)
				in := make([][]float32, R)
				for m := range R {
					names[m] = fmt.Sprintf("m%d", m)
					in[m] = make([]float32, n)
					for i := range in[m] {
						in[m][i] = float32(rng.NormFloat64())
					}
				}
				net := NewInMemory(names...)
				b.Cleanup(net.Close)
				step := uint32(0)
				b.ResetTimer()
				for range b.N {
					step++
					var wg sync.WaitGroup
					for m := range R {
						x := slices.Clone(in[m])
						wg.Add(1)
						go func() {
							defer wg.Done()
							g, k := Group{Members: names, Self: m}, roundKey{job: 1, step: step}
							var err error
							if way == "ring" {
								err = ringReduceScatter(context.Background(), net.Peer(names[m]), g, k, x)
							} else {
								_, err = directReduceScatter(context.Background(), net.Peer(names[m]), g, k, x)
							}
							if err != nil {
								b.Error(err)
							}
						}()
					}
					wg.Wait()
				}
				b.ReportMetric(float64(net.SentBytes(frame.KindReduce))/float64(b.N*R), "B/member")
			})
		}
	}
}

// BenchmarkPullApart times the pull-apart test score: auto runs on every gradient
// collective of every-step sync (R contributions of 1 Mi float32) and on every ZeRO owner's
// chunk (R contributions of 1 Mi/R).
func BenchmarkPullApart(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	for _, R := range []int{3, 4} {
		all := make([][]float32, R)
		for m := range all {
			all[m] = make([]float32, n)
			for i := range all[m] {
				all[m][i] = float32(rng.NormFloat64())
			}
		}
		b.Run(fmt.Sprintf("R=%d", R), func(b *testing.B) {
			b.SetBytes(int64(4 * n * R))
			for range b.N {
				pullApart(all)
			}
		})
	}
}
