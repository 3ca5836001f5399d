package balancer

import (
	"fmt"
	"math/rand/v2"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// Scenario is a generated what-if: nodes, links, the model and the job.
type Scenario struct {
	Name     string
	Seed     uint64
	Snapshot Snapshot
	Model    model.Config
	Job      Job
}

// Scenario names accepted by NewScenario.
const (
	ScenarioSky64 = "sky64"
	ScenarioGeo3  = "geo3"
)

// NewScenario generates the named scenario for seed; the same seed gives the same scenario.
func NewScenario(name string, seed uint64) (Scenario, error) {
	switch name {
	case ScenarioSky64:
		return Sky64(seed), nil
	case ScenarioGeo3:
		return Geo3(seed), nil
	}
	return Scenario{}, fmt.Errorf("unknown scenario %q: want %s or %s", name, ScenarioSky64, ScenarioGeo3)
}

const gibibyte = 1 << 30

// Sky64 is the Sky Computing setting: 64 nodes, each with GEMM speed 100 GFLOP/s divided by
// a slowdown drawn from U[1,2) and memory 16 GiB divided by U[1,3), as the paper's code
// simulates them; every link 10 Gbit/s with a 1 ms RTT; a GPT of 160 blocks, d_model 1024,
// 16 heads, context 512, byte vocabulary, batch 64; DiLoCo sync every 100 steps, int8.
func Sky64(seed uint64) Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x736b793634))
	var snap Snapshot
	for i := 0; i < 64; i++ {
		slow, memDiv := 1+rng.Float64(), 1+2*rng.Float64()
		snap.Nodes = append(snap.Nodes, Node{ID: fmt.Sprintf("n%02d", i), GFLOPS: 100 / slow,
			MemoryBytes: int64(16 * gibibyte / memDiv)})
	}
	snap.Links = fullMesh(snap.Nodes, func(a, b int) Link { return Link{RTT: 1e-3, Bandwidth: 10e9 / 8} })
	cfg := model.Config{Layers: 160, DModel: 1024, Heads: 16, Context: 512, Vocab: 256}
	return Scenario{Name: ScenarioSky64, Seed: seed, Snapshot: snap, Model: cfg, Job: scenarioJob(cfg)}
}

// Geo3 is three regions of four GPU-class nodes with mixed speeds (30 TFLOP/s divided by
// U[1,4)) and memory (24 GiB divided by U[1,2)); 10 Gbit/s and 1 ms RTT inside a region,
// 100 Mbit/s and 80 ms between regions; the Sky64 model with 48 blocks, batch 64; DiLoCo
// sync every 100 steps, int8.
func Geo3(seed uint64) Scenario {
	rng := rand.New(rand.NewPCG(seed, 0x67656f33))
	regions := []string{"us", "eu", "ap"}
	var snap Snapshot
	for _, r := range regions {
		for i := 0; i < 4; i++ {
			slow, memDiv := 1+3*rng.Float64(), 1+rng.Float64()
			snap.Nodes = append(snap.Nodes, Node{ID: fmt.Sprintf("%s-%d", r, i), GFLOPS: 30000 / slow,
				MemoryBytes: int64(24 * gibibyte / memDiv)})
		}
	}
	snap.Links = fullMesh(snap.Nodes, func(a, b int) Link {
		if a/4 == b/4 {
			return Link{RTT: 1e-3, Bandwidth: 10e9 / 8}
		}
		return Link{RTT: 80e-3, Bandwidth: 100e6 / 8}
	})
	cfg := model.Config{Layers: 48, DModel: 1024, Heads: 16, Context: 512, Vocab: 256}
	return Scenario{Name: ScenarioGeo3, Seed: seed, Snapshot: snap, Model: cfg, Job: scenarioJob(cfg)}
}

func scenarioJob(cfg model.Config) Job {
	return Job{Layers: cfg.LayerCosts(), Batch: 64, Context: cfg.Context, Schedule: jobspec.Schedule1F1B,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 100, Compression: 4}}
}

// fullMesh lists a link for every ordered pair of distinct nodes.
func fullMesh(nodes []Node, link func(a, b int) Link) []Link {
	links := make([]Link, 0, len(nodes)*(len(nodes)-1))
	for a := range nodes {
		for b := range nodes {
			if a != b {
				l := link(a, b)
				l.From, l.To = nodes[a].ID, nodes[b].ID
				links = append(links, l)
			}
		}
	}
	return links
}
