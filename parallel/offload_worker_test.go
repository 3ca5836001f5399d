package parallel

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel/offload"
)

// stageStateBytes is the training state of layers [first, last): 16 bytes per parameter.
func stageStateBytes(cfg model.Config, first, last int) int64 {
	var n int64
	for _, p := range model.LayerParams(model.NewLayers(cfg, 1, first, last)) {
		n += int64(len(p.Value.Data))
	}
	return 16 * n
}

// stageBudget is a memory budget for layers [first, last): 60% of their training state,
// or the least above it that holds a layer's weights and gradients (a one-layer stage).
func stageBudget(cfg model.Config, first, last int) int64 {
	var sizes [][]int
	for _, l := range model.NewLayerShells(cfg, first, last) {
		var s []int
		for _, p := range l.Params() {
			s = append(s, kernels.ShapeSize(p.Value.Shape))
		}
		sizes = append(sizes, s)
	}
	b := stageStateBytes(cfg, first, last) * 3 / 5
	for ; ; b += offload.Align {
		if _, err := offload.Choose(sizes, b, 0); err == nil {
			return b
		}
	}
}

// withBudgets gives the stages of plan's replica 0 named in stages a memory budget
// (stageBudget).
func withBudgets(cfg model.Config, plan Plan, stages ...int) Plan {
	out := Plan{Replicas: [][]StagePlan{append([]StagePlan(nil), plan.Replicas[0]...)}}
	for _, s := range stages {
		st := &out.Replicas[0][s]
		st.MemoryBudget = stageBudget(cfg, st.First, st.Last)
	}
	return out
}

// stepAll trains run to steps, returning the losses of its steps.
func stepAll(t *testing.T, run *LocalRun, steps int) []float64 {
	t.Helper()
	var out []float64
	for run.StepsDone() < steps {
		l, err := run.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out
}

// newOffloadRun builds plan's workers over an in-memory network, released with the test.
func newOffloadRun(t *testing.T, cfg JobConfig, plan Plan) *LocalRun {
	t.Helper()
	net := NewInMemory(planNodes(plan)...)
	t.Cleanup(func() { net.Close() })
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := run.Close(); err != nil {
			t.Error(err)
		}
	})
	return run
}

// TestOffloadedPipelineMatchesInMemory: a single-replica pipeline of 2 and 3 stages, 1F1B
// and GPipe, 4 micro-batches (1F1B interleaves forwards and backwards), with a memory
// budget of 60% of the training state on one stage or on several: the per-step losses and the
// validation loss are the same bits as in memory, no store's resident chunks exceed its
// budget, and chunks really moved.
func TestOffloadedPipelineMatchesInMemory(t *testing.T) {
	cfg := pipelineConfig(6)
	cfg.Train.OffloadDir = t.TempDir()
	L := cfg.Train.Model.NumLayers()
	for _, sched := range []jobspec.Schedule{jobspec.Schedule1F1B, jobspec.ScheduleGPipe} {
		cfg.Schedule = sched
		for _, tc := range []struct {
			S      int
			budget []int
		}{{2, []int{1}}, {2, []int{0, 1}}, {3, []int{1, 2}}} {
			plan := EvenPlan(L, nodeNames("p", tc.S))
			want, _ := runLocal(t, cfg, plan)
			run := newOffloadRun(t, cfg, withBudgets(cfg.Train.Model, plan, tc.budget...))
			got := stepAll(t, run, cfg.Train.Steps)
			for i := range want {
				if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
					t.Fatalf("%s S=%d budgets on %v: step %d loss %v offloaded, %v in memory", sched, tc.S, tc.budget, i+1, got[i], want[i])
				}
			}
			checkStores(t, run)
			ev, err := run.Evaluate(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			ref := newOffloadRun(t, cfg, plan)
			stepAll(t, ref, cfg.Train.Steps)
			if evRef, _ := ref.Evaluate(context.Background()); math.Float64bits(ev) != math.Float64bits(evRef) {
				t.Fatalf("%s S=%d: validation loss %v offloaded, %v in memory", sched, tc.S, ev, evRef)
			}
		}
	}
}

// checkStores checks every offloading worker's store: resident peak within its budget,
// chunks read and written.
func checkStores(t *testing.T, run *LocalRun) {
	t.Helper()
	n := 0
	for _, w := range run.Workers() {
		st, ok := w.OffloadStats()
		if !ok {
			continue
		}
		n++
		budget := w.plan.Replicas[w.replica][w.stage].MemoryBudget
		if st.ResidentPeakBytes > budget || st.ResidentPeakBytes == 0 || st.BytesRead == 0 || st.BytesWritten == 0 {
			t.Fatalf("stage %d: resident peak %d (budget %d), read %d, written %d", w.stage, st.ResidentPeakBytes, budget, st.BytesRead, st.BytesWritten)
		}
	}
	if n == 0 {
		t.Fatal("no worker offloads")
	}
}

// TestOffloadedStageRestores: snapshots of a 2-stage pipeline whose stages offload, taken
// after 3 of 8 steps, restore into the same offloading plan and into a 3-stage plan in
// memory (resharded), and both continue with the uninterrupted in-memory run's losses; an
// in-memory snapshot restores into offloading stages too.
func TestOffloadedStageRestores(t *testing.T) {
	cfg := pipelineConfig(8)
	cfg.Train.OffloadDir = t.TempDir()
	L := cfg.Train.Model.NumLayers()
	two := EvenPlan(L, nodeNames("a", 2))
	full, _ := runLocal(t, cfg, two)
	first := newOffloadRun(t, cfg, withBudgets(cfg.Train.Model, two, 0, 1))
	stepAll(t, first, 3)
	weights, moments := snapshots(first)
	for _, plan := range []Plan{withBudgets(cfg.Train.Model, EvenPlan(L, nodeNames("b", 2)), 0, 1), EvenPlan(L, nodeNames("c", 3))} {
		run := continueRestored(t, cfg, plan, weights, moments, 3, full)
		run.Close()
	}
	mem := newOffloadRun(t, cfg, two)
	stepAll(t, mem, 3)
	weights, moments = snapshots(mem)
	run := continueRestored(t, cfg, withBudgets(cfg.Train.Model, EvenPlan(L, nodeNames("d", 2)), 0, 1), weights, moments, 3, full)
	defer run.Close()
	delete(moments[0].Tensors, "lm_head.weight.exp_avg")
	if err := run.Workers()[1].Restore(weights, moments[0], 3); err == nil || !strings.Contains(err.Error(), "lm_head.weight.exp_avg") {
		t.Fatalf("restore with a missing moment: %v", err)
	}
}

// TestOffloadRefusedWithReplicas: a stage with a memory budget in a plan of two replicas,
// or without an offload directory, is refused with the reason.
func TestOffloadRefusedWithReplicas(t *testing.T) {
	cfg := pipelineConfig(2)
	cfg.Train.OffloadDir = t.TempDir()
	L := cfg.Train.Model.NumLayers()
	plan := twoReplicas("r", L, 2, 2)
	plan.Replicas[1][0].MemoryBudget = 1 << 20
	net := NewInMemory(planNodes(plan)...)
	defer net.Close()
	_, err := NewWorker(cfg, plan, "r2", net.Peer("r2"), testData())
	if err == nil || !strings.Contains(err.Error(), "one replica") {
		t.Fatalf("offload with two replicas: %v", err)
	}
	one := withBudgets(cfg.Train.Model, EvenPlan(L, []string{"s"}), 0)
	cfg.Train.OffloadDir = ""
	if _, err := NewWorker(cfg, one, "s", net.Peer("r0"), testData()); err == nil || !strings.Contains(err.Error(), "offload directory") {
		t.Fatalf("offload without a directory: %v", err)
	}
}

// TestOffloadedStageRestoresZeroPieces: a ZeRO-2 checkpoint (moments in per-replica
// pieces) restores into offloading stages of one replica exactly as into in-memory ones:
// their snapshots are the same bits.
func TestOffloadedStageRestoresZeroPieces(t *testing.T) {
	cfg := pipelineConfig(2)
	cfg.Sync.Zero = 2
	cfg.Train.OffloadDir = t.TempDir()
	L := cfg.Train.Model.NumLayers()
	zrun := newOffloadRun(t, cfg, zeroPlan("z", L, 2))
	stepAll(t, zrun, 2)
	weights, perReplica := snapshots(zrun)
	merged := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}, Metadata: perReplica[0].Metadata}
	for _, m := range perReplica {
		maps.Copy(merged.Tensors, m.Tensors)
	}
	all := map[int]*model.TensorFile{0: merged}
	cfg.Sync.Zero = 0
	two := EvenPlan(L, nodeNames("m", 2))
	var snaps [2]map[string]*kernels.Tensor
	for i, plan := range []Plan{two, withBudgets(cfg.Train.Model, EvenPlan(L, nodeNames("o", 2)), 0, 1)} {
		run := newOffloadRun(t, cfg, plan)
		for _, w := range run.Workers() {
			if err := w.Restore(weights, all[0], 2); err != nil {
				t.Fatal(err)
			}
		}
		w, m := snapshots(run)
		snaps[i] = maps.Clone(w.Tensors)
		maps.Copy(snaps[i], m[0].Tensors)
	}
	if len(snaps[0]) != len(snaps[1]) || len(snaps[0]) == 0 {
		t.Fatalf("%d tensors in memory, %d offloaded", len(snaps[0]), len(snaps[1]))
	}
	for k, a := range snaps[0] {
		b, ok := snaps[1][k]
		if !ok || !slices.Equal(a.Data, b.Data) {
			t.Fatalf("tensor %s differs after restoring ZeRO pieces offloaded", k)
		}
	}
}

// TestStagePlanBudgetOmitted: a stage without a memory budget encodes as before the
// field existed (stored plans keep their bytes); one with it round-trips.
func TestStagePlanBudgetOmitted(t *testing.T) {
	b, err := json.Marshal(StagePlan{Node: "a", First: 0, Last: 2})
	if err != nil || string(b) != `{"node":"a","first":0,"last":2}` {
		t.Fatalf("%s, %v", b, err)
	}
	var st StagePlan
	if err := json.Unmarshal([]byte(`{"node":"a","first":0,"last":2,"memory_budget":4096}`), &st); err != nil || st.MemoryBudget != 4096 {
		t.Fatalf("%+v, %v", st, err)
	}
}
