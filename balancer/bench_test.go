package balancer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// bigInstance is n nodes in regions of 100 (10 Gbit/s inside, 1 Gbit/s between, every pair
// listed) and a GPT of blocks+2 layers, batch 1024.
func bigInstance(n, blocks int) (Snapshot, Job) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(blocks)))
	var snap Snapshot
	for i := 0; i < n; i++ {
		snap.Nodes = append(snap.Nodes, Node{ID: fmt.Sprintf("n%04d", i), GFLOPS: 100 / (1 + rng.Float64()),
			MemoryBytes: int64(16 * gibibyte / (1 + 2*rng.Float64()))})
	}
	snap.Links = fullMesh(snap.Nodes, func(a, b int) Link {
		if a/100 == b/100 {
			return Link{RTT: 1e-3, Bandwidth: 10e9 / 8}
		}
		return Link{RTT: 20e-3, Bandwidth: 1e9 / 8}
	})
	cfg := model.Config{Layers: blocks, DModel: 1024, Heads: 16, Context: 512, Vocab: 256}
	return snap, Job{Layers: cfg.LayerCosts(), Batch: 1024, Context: cfg.Context,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 100, Compression: 4}}
}

// BenchmarkPlan1000x480 is acceptance 5: auto planning 1,000 nodes × 480 layers, from the
// snapshot (a million links) to the plan. Run with
// go test ./balancer -run '^$' -bench Plan -benchtime 5x
func BenchmarkPlan1000x480(b *testing.B) {
	snap, job := bigInstance(1000, 478)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := NewPlan(snap, job, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanScaling shows how auto's time grows with nodes and layers.
func BenchmarkPlanScaling(b *testing.B) {
	for _, size := range [][2]int{{250, 478}, {500, 478}, {1000, 478}, {1000, 238}, {1000, 958}} {
		snap, job := bigInstance(size[0], size[1])
		b.Run(fmt.Sprintf("nodes=%d/layers=%d", size[0], size[1]+2), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := NewPlan(snap, job, Options{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
