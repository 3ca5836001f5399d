package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// randomInstance draws a small heterogeneous mesh and job: 1..maxNodes nodes with speeds
// over 20× and memory sized around the model's share, links with bandwidth from 1 MB/s to
// 1 GB/s and RTT up to 100 ms (some pairs missing), 1..maxBlocks blocks, either schedule.
func randomInstance(rng *rand.Rand, maxNodes, maxBlocks, maxBatch int) (Snapshot, Job) {
	heads := 1 + rng.IntN(4)
	cfg := model.Config{Layers: 1 + rng.IntN(maxBlocks), DModel: heads * 16 * (1 + rng.IntN(4)),
		Heads: heads, Context: 16 * (1 + rng.IntN(8)), Vocab: 256}
	job := Job{Layers: cfg.LayerCosts(), Batch: 1 + rng.IntN(maxBatch), Context: cfg.Context,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 1 + rng.IntN(50), Compression: 1 + 3*rng.Float64()}}
	if rng.IntN(3) == 0 {
		job.Schedule = jobspec.ScheduleGPipe
	}
	if rng.IntN(4) == 0 {
		job.Sync.Mode = jobspec.SyncEveryStep
	}
	static, act := 0.0, 0.0
	for _, c := range job.Layers {
		static += float64(c.StaticBytes())
		act += float64(c.SavedBytesPerToken) * float64(cfg.Context)
	}
	n := 1 + rng.IntN(maxNodes)
	var snap Snapshot
	for i := 0; i < n; i++ {
		share := (static + act*float64(job.Batch)) / float64(n)
		snap.Nodes = append(snap.Nodes, Node{ID: fmt.Sprintf("n%d", i),
			GFLOPS:      1 + 20*rng.Float64(),
			MemoryBytes: int64(share * (0.8 + 3*rng.Float64()))})
	}
	for a := 0; a < n; a++ {
		for b := 0; b < n; b++ {
			if a == b || rng.IntN(10) == 0 {
				continue
			}
			snap.Links = append(snap.Links, Link{From: snap.Nodes[a].ID, To: snap.Nodes[b].ID,
				Bandwidth: math.Pow(10, 6+3*rng.Float64()), RTT: 0.1 * rng.Float64()})
		}
	}
	return snap, job
}
