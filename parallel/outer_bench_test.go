package parallel

import (
	"context"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// BenchmarkOuterStep times a step of three one-stage DiLoCo replicas in one process that
// is an outer step every time (H = 1), over the in-memory transport: what the quorum's
// presence and agreement rounds add to an outer step without failures.
//
//	go test ./parallel -run '^$' -bench OuterStep -benchtime 200x -count 5
func BenchmarkOuterStep(b *testing.B) {
	cfg := pipelineConfig(b.N + 1)
	cfg.Train.MicroBatches = 2
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.Mode, cfg.Sync.InnerSteps = jobspec.SyncDiLoCo, 1
	L := cfg.Train.Model.NumLayers()
	plan := Plan{Replicas: [][]StagePlan{{{Node: "a", Last: L}}, {{Node: "b", Last: L}}, {{Node: "c", Last: L}}}}
	net := NewInMemory("a", "b", "c")
	b.Cleanup(net.Close)
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := run.Step(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
