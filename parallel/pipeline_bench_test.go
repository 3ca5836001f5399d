package parallel

import (
	"context"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// BenchmarkPipelineBubble measures the share of a step that pipeline stages spend waiting
// for their neighbours, next to the schedule's (S−1)/(M+S−1), for 2 stages (one core
// each, one kernel thread each) and M micro-batches:
//
//	go test -run '^$' -bench PipelineBubble ./parallel
func BenchmarkPipelineBubble(b *testing.B) {
	kernels.SetThreads(1)
	defer kernels.SetThreads(0)
	for _, M := range []int{2, 4, 8} {
		for _, sched := range []jobspec.Schedule{jobspec.Schedule1F1B, jobspec.ScheduleGPipe} {
			b.Run(string(sched)+"/M"+string(rune('0'+M)), func(b *testing.B) {
				cfg := pipelineConfig(1 << 20)
				cfg.Train.Model = model.Config{Layers: 4, DModel: 128, Heads: 4, Context: 64, Vocab: 256}
				cfg.Train.Batch, cfg.Train.MicroBatches, cfg.Schedule = 4*M, M, sched
				net := NewInMemory("s0", "s1")
				defer net.Close()
				// Layers: embed + 4 blocks + head; [0,3) and [3,6) are close in cost.
				plan := Plan{Replicas: [][]StagePlan{{{Node: "s0", First: 0, Last: 3}, {Node: "s1", First: 3, Last: 6}}}}
				run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
				if err != nil {
					b.Fatal(err)
				}
				run.Step(context.Background()) // warm up
				var wait0 time.Duration
				for _, w := range run.Workers() {
					wait0 += w.WaitTime()
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := run.Step(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				var wait time.Duration
				for _, w := range run.Workers() {
					wait += w.WaitTime()
				}
				idle := float64(wait-wait0) / float64(len(run.Workers())) / float64(b.Elapsed())
				b.ReportMetric(idle, "idle-frac")
				b.ReportMetric(BubbleFraction(2, M), "schedule-frac")
			})
		}
	}
}
