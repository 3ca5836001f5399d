package balancer

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// checkPlan verifies, from the job's layer costs alone, that every replica tiles the layers
// with contiguous non-empty ranges, that no node holds two stages, that the replicas'
// batches add up, and that every stage fits its node's memory under the schedule.
func checkPlan(t *testing.T, snap Snapshot, job Job, p Plan) {
	t.Helper()
	budget := map[string]float64{}
	for _, n := range snap.Nodes {
		budget[n.ID] = float64(n.MemoryBytes)
		if n.GPU != nil && n.GPU.MemoryBytes > 0 {
			budget[n.ID] = float64(n.GPU.MemoryBytes)
		}
	}
	used, batch := map[string]bool{}, 0
	if len(p.Replicas) == 0 || p.MicroBatches < 1 {
		t.Fatalf("plan has %d replicas and %d micro-batches", len(p.Replicas), p.MicroBatches)
	}
	for r, rep := range p.Replicas {
		batch += rep.Batch
		next := 0
		S, mr := len(rep.Stages), min(p.MicroBatches, rep.Batch)
		seqs := math.Ceil(float64(rep.Batch) / float64(mr))
		for s, st := range rep.Stages {
			if st.First != next || st.Last <= st.First {
				t.Fatalf("replica %d stage %d: layers [%d,%d) after %d", r, s, st.First, st.Last, next)
			}
			next = st.Last
			if _, ok := budget[st.Node]; !ok || used[st.Node] {
				t.Fatalf("replica %d stage %d: node %q unknown or used twice", r, s, st.Node)
			}
			used[st.Node] = true
			inFlight := float64(mr)
			if job.Schedule != jobspec.ScheduleGPipe {
				inFlight = float64(min(mr, S-s))
			}
			tok := seqs * float64(job.Context)
			need := 2 * tok * float64(job.Layers[st.Last-1].OutputBytesPerToken)
			if st.First > 0 {
				need += 2 * tok * float64(job.Layers[st.First-1].OutputBytesPerToken)
			}
			need += stageActivations(job.Layers[st.First:st.Last], st.Recompute, inFlight, tok)
			need += checkStageState(t, job, len(p.Replicas), st)
			if len(p.Replicas) > 1 && (st.OffloadBytes > 0 || st.MemoryBudget > 0) {
				t.Fatalf("replica %d stage %d offloads (%d bytes, budget %d) in a plan of %d replicas: the engine offloads only a single replica", r, s, st.OffloadBytes, st.MemoryBudget, len(p.Replicas))
			}
			if need > budget[st.Node]*(1+1e-12) {
				t.Fatalf("replica %d stage %d on %s needs %.0f bytes, budget %.0f", r, s, st.Node, need, budget[st.Node])
			}
			if math.Abs(need-st.MemoryBytes) > 1+1e-9*need {
				t.Fatalf("replica %d stage %d on %s claims %.0f bytes, needs %.0f", r, s, st.Node, st.MemoryBytes, need)
			}
		}
		if next != len(job.Layers) {
			t.Fatalf("replica %d covers [0,%d) of %d layers", r, next, len(job.Layers))
		}
	}
	if batch != job.Batch {
		t.Fatalf("replica batches sum to %d, job batch %d", batch, job.Batch)
	}
}

// stageActivations is the activation memory of a stage's layers: every layer's saved
// activations per micro-batch in flight, or, recomputing, the outputs of the layers that
// save any plus the largest layer's saved activations once.
func stageActivations(layers []model.LayerCost, recompute bool, inFlight, tok float64) float64 {
	need, largest := 0.0, 0.0
	for _, c := range layers {
		switch {
		case !recompute:
			need += inFlight * tok * float64(c.SavedBytesPerToken)
		case c.SavedBytesPerToken > 0:
			need += inFlight * tok * float64(c.OutputBytesPerToken)
			largest = max(largest, float64(c.SavedBytesPerToken))
		}
	}
	return need + tok*largest
}

// checkStageState checks a stage's ZeRO, recomputation and offload against the job and
// returns its resident training state: weights and gradients, the AdamW moments (1/R of
// them, plus a float32 of rounding per layer and moment, under ZeRO with R ≥ 2 replicas in
// sync mode), less what it offloads, keeping at least its largest layer resident.
func checkStageState(t *testing.T, job Job, R int, st Stage) float64 {
	t.Helper()
	zero := 0
	if job.Sync.Mode == jobspec.SyncEveryStep && R >= 2 {
		zero = job.Zero
	}
	if st.Zero != zero {
		t.Fatalf("stage on %s: zero %d, want %d (job zero %d, %d replicas)", st.Node, st.Zero, zero, job.Zero, R)
	}
	if st.Recompute && job.Recompute != jobspec.RecomputeOn && job.Recompute != jobspec.RecomputeAuto {
		t.Fatalf("stage on %s recomputes under recompute %q", st.Node, job.Recompute)
	}
	state, largest := 0.0, 0.0
	for _, c := range job.Layers[st.First:st.Last] {
		opt := float64(c.OptimizerBytes)
		if zero > 0 {
			opt = math.Min(opt, opt/float64(R)+8)
		}
		state += float64(c.ParamBytes+c.GradBytes) + opt
		largest = max(largest, float64(c.StaticBytes()))
	}
	if st.OffloadBytes == 0 {
		if st.MemoryBudget != 0 {
			t.Fatalf("stage on %s: memory budget %d without offload", st.Node, st.MemoryBudget)
		}
		return state
	}
	if job.Offload != jobspec.OffloadOn && job.Offload != jobspec.OffloadAuto {
		t.Fatalf("stage on %s offloads %d bytes under offload %q", st.Node, st.OffloadBytes, job.Offload)
	}
	resident := state - float64(st.OffloadBytes)
	if st.OffloadBytes < 0 || resident < math.Min(state, largest)-1 {
		t.Fatalf("stage on %s offloads %d of %.0f bytes, keeping %.0f < its largest layer's %.0f", st.Node, st.OffloadBytes, state, resident, largest)
	}
	if math.Abs(float64(st.MemoryBudget)-resident) > 1 {
		t.Fatalf("stage on %s: memory budget %d, resident state %.0f", st.Node, st.MemoryBudget, resident)
	}
	return resident
}

func simulated(t *testing.T, snap Snapshot, job Job, p Plan) float64 {
	t.Helper()
	sim, err := Simulate(snap, job, p)
	if err != nil {
		t.Fatal(err)
	}
	return sim.Step
}

// Acceptance 1: on random instances every strategy's plan covers the layers, fits memory,
// is deterministic and simulates no slower than even's.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	feasible := 0
	const instances = 150
	for i := 0; i < instances; i++ {
		snap, job := randomInstance(rng, 9, 14, 12)
		even, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyEven})
		if err != nil {
			if !errors.Is(err, ErrInfeasible) {
				t.Fatalf("instance %d: even: %v", i, err)
			}
			// Other strategies may still fit where equal counts do not; they must be valid.
			for _, s := range []jobspec.Strategy{jobspec.StrategySky, jobspec.StrategyAuto} {
				if p, err := NewPlan(snap, job, Options{Strategy: s}); err == nil {
					checkPlan(t, snap, job, p)
				}
			}
			continue
		}
		feasible++
		checkPlan(t, snap, job, even)
		evenT := simulated(t, snap, job, even)
		strategies := []jobspec.Strategy{jobspec.StrategySky, jobspec.StrategyAuto}
		if len(snap.Nodes) <= 4 && len(job.Layers) <= 10 {
			strategies = append(strategies, jobspec.StrategyOptimal)
		}
		for _, s := range strategies {
			p, err := NewPlan(snap, job, Options{Strategy: s})
			if err != nil {
				t.Fatalf("instance %d: %s failed where even succeeds: %v", i, s, err)
			}
			checkPlan(t, snap, job, p)
			if got := simulated(t, snap, job, p); got > evenT*(1+1e-9) {
				t.Errorf("instance %d: %s simulates %.6g s, even %.6g s", i, s, got, evenT)
			}
			again, _ := NewPlan(snap, job, Options{Strategy: s})
			if !reflect.DeepEqual(p, again) {
				t.Fatalf("instance %d: %s is not deterministic", i, s)
			}
		}
	}
	if feasible < instances/2 {
		t.Fatalf("only %d of %d random instances were feasible: the generator is too tight", feasible, instances)
	}
	t.Logf("%d of %d instances feasible for even", feasible, instances)
}

// Auto groups replicas on a multi-cluster instance and its plan still checks out.
func TestPlanPropertiesReplicas(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		sc := Geo3(seed)
		for _, s := range []jobspec.Strategy{jobspec.StrategyEven, jobspec.StrategySky, jobspec.StrategyAuto} {
			p, err := NewPlan(sc.Snapshot, sc.Job, Options{Strategy: s})
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, sc.Snapshot, sc.Job, p)
		}
	}
}
