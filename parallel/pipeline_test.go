package parallel

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

func pipelineConfig(steps int) JobConfig {
	t := testConfig()
	t.Batch, t.MicroBatches, t.Steps, t.EvalEvery = 8, 4, steps, 0
	sc := DefaultSyncConfig()
	sc.Mode = jobspec.SyncEveryStep
	return JobConfig{Train: t, Schedule: jobspec.Schedule1F1B, Sync: sc, Job: 1}
}

func nodeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

// singleProcessLosses trains cfg.Train in one process and returns its per-step losses.
func singleProcessLosses(t *testing.T, cfg TrainConfig) []float64 {
	t.Helper()
	tr, err := NewTrainer(cfg, testData())
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for tr.StepsDone() < cfg.Steps {
		out = append(out, step(t, tr))
	}
	return out
}

// planNodes lists the nodes of plan's stages.
func planNodes(plan Plan) []string {
	var nodes []string
	for _, r := range plan.Replicas {
		for _, s := range r {
			nodes = append(nodes, s.Node)
		}
	}
	return nodes
}

func runLocal(t *testing.T, cfg JobConfig, plan Plan) ([]float64, *LocalRun) {
	t.Helper()
	net := NewInMemory(planNodes(plan)...)
	defer net.Close()
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for run.StepsDone() < cfg.Train.Steps {
		l, err := run.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out, run
}

// TestPipelineMatchesSingleProcess: the GPT split into 1–4 stages, with 1F1B and GPipe
// and 4 micro-batches, gives the single-process losses.
func TestPipelineMatchesSingleProcess(t *testing.T) {
	const steps = 20
	cfg := pipelineConfig(steps)
	want := singleProcessLosses(t, cfg.Train)
	for _, sched := range []jobspec.Schedule{jobspec.Schedule1F1B, jobspec.ScheduleGPipe} {
		for S := 1; S <= 4; S++ {
			cfg.Schedule = sched
			plan := EvenPlan(cfg.Train.Model.NumLayers(), nodeNames("n", S))
			got, run := runLocal(t, cfg, plan)
			for i := range want {
				if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-5 {
					t.Fatalf("%s, %d stages, step %d: loss %v, single process %v", sched, S, i+1, got[i], want[i])
				}
			}
			if pipe, sync := run.BytesSent(); (S > 1) != (pipe > 0) || sync != 0 {
				t.Errorf("%s, %d stages: %d pipeline bytes, %d sync bytes", sched, S, pipe, sync)
			}
		}
	}
}

// TestSyncReplicasMatchOneProcessWithTheirCombinedBatch: R replicas in sync mode train like
// one process whose batch is their combined batch (the sampler gives replica k rows
// [k·B, (k+1)·B) of it).
func TestSyncReplicasMatchOneProcessWithTheirCombinedBatch(t *testing.T) {
	cfg := pipelineConfig(6)
	cfg.Train.Batch, cfg.Train.MicroBatches = 4, 2
	whole := cfg.Train
	whole.Batch, whole.MicroBatches = 12, 6
	want := singleProcessLosses(t, whole)
	L := cfg.Train.Model.NumLayers()
	// Three replicas cut differently: ring all-reduce over groups of three.
	plan := EvenPlan(L, []string{"a0", "a1"}, []string{"b0"}, []string{"c0", "c1", "c2"})
	got, run := runLocal(t, cfg, plan)
	for i := range want {
		if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-4 {
			t.Fatalf("step %d: 3 replicas %v, one process %v", i+1, got[i], want[i])
		}
	}
	assertReplicasEqual(t, run)
}

// assertReplicasEqual checks that every layer has the same weights in every replica.
func assertReplicasEqual(t *testing.T, run *LocalRun) {
	t.Helper()
	byName := map[string][]float32{}
	for _, w := range run.Workers() {
		for _, p := range model.LayerParams(w.Layers()) {
			ref, ok := byName[p.Name]
			if !ok {
				byName[p.Name] = p.Value.Data
				continue
			}
			for i := range ref {
				if ref[i] != p.Value.Data[i] {
					t.Fatalf("%s differs between replicas at %d: %v vs %v", p.Name, i, ref[i], p.Value.Data[i])
				}
			}
		}
	}
}

func TestStageOpsOrder(t *testing.T) {
	ops := stageOps(jobspec.Schedule1F1B, 0, 3, 4)
	want := "F0 F1 F2 B0 F3 B1 B2 B3"
	var got string
	for i, o := range ops {
		if i > 0 {
			got += " "
		}
		if o.backward {
			got += fmt.Sprintf("B%d", o.micro)
		} else {
			got += fmt.Sprintf("F%d", o.micro)
		}
	}
	if got != want {
		t.Fatalf("1F1B stage 0 of 3: %s, want %s", got, want)
	}
	if BubbleFraction(4, 4) != 3.0/7 {
		t.Fatal("bubble of 4 stages, 4 micro-batches is 3/7")
	}
}

// TestUnequalReplicaBatchesWeighTheirGradients: replicas given 4 and 8 sequences by the
// plan train like one process with the 12 — the average is weighted by batch.
func TestUnequalReplicaBatchesWeighTheirGradients(t *testing.T) {
	cfg := pipelineConfig(5)
	cfg.Train.MicroBatches = 2
	whole := cfg.Train
	whole.Batch, whole.MicroBatches = 12, 3
	want := singleProcessLosses(t, whole)
	L := cfg.Train.Model.NumLayers()
	plan := EvenPlan(L, []string{"a0", "a1"}, []string{"b0", "b1", "b2"})
	plan.Batches = []int{4, 8}
	got, run := runLocal(t, cfg, plan)
	for i := range want {
		if rel := math.Abs(got[i]-want[i]) / want[i]; rel > 1e-4 {
			t.Fatalf("step %d: replicas of 4 and 8 %v, one process of 12 %v", i+1, got[i], want[i])
		}
	}
	assertReplicasEqual(t, run)
}

// TestDiLoCoWithOneReplicaIsPlainTraining: a single pipeline in DiLoCo mode trains exactly
// like one process (no outer step without replicas to synchronise).
func TestDiLoCoWithOneReplicaIsPlainTraining(t *testing.T) {
	cfg := pipelineConfig(8)
	want := singleProcessLosses(t, cfg.Train)
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.InnerSteps = 2
	got, _ := runLocal(t, cfg, EvenPlan(cfg.Train.Model.NumLayers(), nodeNames("d", 2)))
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: DiLoCo with one replica %v, one process %v", i+1, got[i], want[i])
		}
	}
}
