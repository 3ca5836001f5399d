package parallel

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// TestRestoreUnderAnotherPlanContinuesExactly: stage snapshots taken under a 2-stage plan,
// merged and restored into a 3-stage plan (resharding), continue with the losses of the
// uninterrupted run.
func TestRestoreUnderAnotherPlanContinuesExactly(t *testing.T) {
	cfg := pipelineConfig(8)
	L := cfg.Train.Model.NumLayers()
	full, _ := runLocal(t, cfg, EvenPlan(L, nodeNames("u", 2)))

	net := NewInMemory(nodeNames("a", 2)...)
	first, err := NewLocalRun(cfg, EvenPlan(L, nodeNames("a", 2)), testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	for first.StepsDone() < 3 {
		if _, err := first.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	weights, perReplica := snapshots(first)
	moments := perReplica[0]
	net.Close()

	second := continueRestored(t, cfg, EvenPlan(L, nodeNames("b", 3)), weights, perReplica, 3, full)
	delete(moments.Tensors, "lm_head.weight.exp_avg")
	if err := second.Workers()[2].Restore(weights, moments, 3); err == nil {
		t.Fatal("restore with a missing moment succeeded")
	}
}

// snapshots merges the workers' snapshots into one weights file and, per replica, one
// moments file, as a node restoring from a checkpoint's files does.
func snapshots(run *LocalRun) (*model.TensorFile, map[int]*model.TensorFile) {
	weights := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
	moments := map[int]*model.TensorFile{}
	for _, w := range run.Workers() {
		s, err := w.Snapshot()
		if err != nil {
			panic(err)
		}
		for k, v := range s.Model {
			weights.Tensors[k] = v
		}
		m := moments[s.Replica]
		if m == nil {
			m = &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
			moments[s.Replica] = m
		}
		for k, v := range s.Optimizer {
			m.Tensors[k] = v
		}
		m.Metadata = s.OptimizerMeta
	}
	return weights, moments
}

// TestDiLoCoRestoreContinuesExactly: a DiLoCo run of 2 replicas × 2 stages, snapshotted
// right after an outer step (where the replicas agree), restored into replicas cut
// differently — each replica with its own inner moments, the shared outer momentum —
// continues with the uninterrupted run's losses. Between outer steps the replicas differ,
// and Consistent says so.
func TestDiLoCoRestoreContinuesExactly(t *testing.T) {
	cfg := pipelineConfig(10)
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.InnerSteps, cfg.Sync.Codec = 2, jobspec.CodecNone
	L := cfg.Train.Model.NumLayers()
	split := func(prefix string, a, b int) Plan { return twoReplicas(prefix, L, a, b) }
	full, _ := runLocal(t, cfg, split("u", 2, 2))

	net := NewInMemory(nodeNames("a", 4)...)
	first, err := NewLocalRun(cfg, split("a", 2, 2), testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	for first.StepsDone() < 5 {
		if _, err := first.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if c := first.Workers()[0].Consistent(); c != (first.StepsDone()%2 == 0) {
			t.Fatalf("after step %d Consistent() = %v", first.StepsDone(), c)
		}
	}
	if _, err := first.Step(context.Background()); err != nil { // step 6: an outer step
		t.Fatal(err)
	}
	weights, moments := snapshots(first)
	if _, ok := moments[1].Tensors["transformer.wte.weight"+outerMomentumSuffix]; !ok || len(moments) != 2 {
		t.Fatalf("snapshots lack the outer momentum or a replica: %d replicas", len(moments))
	}
	net.Close()
	continueRestored(t, cfg, split("b", 1, 3), weights, moments, 6, full)
}

// TestRestoreCarriesErrorFeedback: with a lossy codec between replicas, a run restored
// from snapshots continues with the uninterrupted run's losses, in sync mode (gradients
// compressed every step, restored mid-run) and in DiLoCo (pseudo-gradients, restored after
// an outer step). That holds only because each replica's error-feedback residual is in the
// checkpoint: without it the next compressed round differs.
func TestRestoreCarriesErrorFeedback(t *testing.T) {
	for _, tc := range []struct {
		mode  jobspec.Sync
		codec jobspec.Codec
		at    int
	}{{jobspec.SyncEveryStep, jobspec.CodecInt8, 3}, {jobspec.SyncDiLoCo, jobspec.CodecInt8, 4}, {jobspec.SyncEveryStep, jobspec.CodecTopK, 3}} {
		t.Run(string(tc.mode)+"/"+string(tc.codec), func(t *testing.T) {
			cfg := pipelineConfig(8)
			cfg.Sync = DefaultSyncConfig()
			cfg.Sync.Mode, cfg.Sync.Codec, cfg.Sync.InnerSteps = tc.mode, tc.codec, 2
			L := cfg.Train.Model.NumLayers()
			plan := func(prefix string) Plan { return twoReplicas(prefix, L, 2, 2) }
			full, _ := runLocal(t, cfg, plan("u"))

			net := NewInMemory(nodeNames("a", 4)...)
			first, err := NewLocalRun(cfg, plan("a"), testData(), net.Peer)
			if err != nil {
				t.Fatal(err)
			}
			for first.StepsDone() < tc.at {
				if _, err := first.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			weights, moments := snapshots(first)
			net.Close()
			if _, ok := moments[1].Tensors["transformer.wte.weight"+residualSuffix(1)]; !ok {
				t.Fatal("the snapshot holds no error-feedback residual of replica 1")
			}
			continueRestored(t, cfg, plan("b"), weights, moments, tc.at, full)
		})
	}
}

// twoReplicas is a plan of two replicas of two stages, cut at layer a and at layer b.
func twoReplicas(prefix string, L, a, b int) Plan {
	return Plan{Replicas: [][]StagePlan{
		{{Node: prefix + "0", First: 0, Last: a}, {Node: prefix + "1", First: a, Last: L}},
		{{Node: prefix + "2", First: 0, Last: b}, {Node: prefix + "3", First: b, Last: L}},
	}}
}

// continueRestored starts plan, restores every worker from weights and its replica's
// moments at step at, and checks that the steps after it give the uninterrupted run's
// losses full. It returns the run, whose network closes with the test.
func continueRestored(t *testing.T, cfg JobConfig, plan Plan, weights *model.TensorFile, moments map[int]*model.TensorFile, at int, full []float64) *LocalRun {
	t.Helper()
	net := NewInMemory(planNodes(plan)...)
	t.Cleanup(func() { net.Close() })
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range run.Workers() {
		if err := w.Restore(weights, moments[w.Replica()], at); err != nil {
			t.Fatal(err)
		}
	}
	for i := at; i < len(full); i++ {
		got, err := run.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got != full[i] {
			t.Fatalf("step %d after restore: %v, uninterrupted %v", i+1, got, full[i])
		}
	}
	return run
}

// nanNorm is the transport of a stage node whose gradient norm at step is not a number:
// every stage of its replica then skips that step (its optimizer applies no update).
type nanNorm struct {
	Transport
	step uint32
}

func (p nanNorm) Send(ctx context.Context, to string, f *frame.Frame) error {
	if f.Kind == frame.KindScalar && f.Index == normIndex && f.Step == p.step {
		g := *f
		g.Payload = binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.NaN()))
		f = &g
	}
	return p.Transport.Send(ctx, to, f)
}

// TestCheckpointAfterASkippedStepRestores: a step whose global gradient norm is not finite
// is skipped (the optimizer's update count stays behind the step count); a checkpoint
// taken after it restores, and the run goes on with the uninterrupted run's losses. The
// restore refused it before ("optimizer state is at step 2, the checkpoint at 3").
func TestCheckpointAfterASkippedStepRestores(t *testing.T) {
	cfg := pipelineConfig(6)
	L := cfg.Train.Model.NumLayers()
	skipping := func(prefix string, steps int) (*LocalRun, []float64) {
		names := nodeNames(prefix, 2)
		net := NewInMemory(names...)
		t.Cleanup(func() { net.Close() })
		run, err := NewLocalRun(cfg, EvenPlan(L, names), testData(), func(node string) Transport {
			return nanNorm{net.Peer(node), 1} // each stage hears a NaN from the other
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { run.Close() })
		var losses []float64
		for run.StepsDone() < steps {
			l, err := run.Step(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			losses = append(losses, l)
		}
		return run, losses
	}
	_, full := skipping("u", cfg.Train.Steps)
	first, _ := skipping("a", 3)
	weights, moments := snapshots(first)
	if got := moments[0].Metadata["step"]; got != "2" {
		t.Fatalf("the optimizer's update count after 3 steps, one skipped: %q, want 2", got)
	}
	continueRestored(t, cfg, EvenPlan(L, nodeNames("b", 2)), weights, moments, 3, full)
}
