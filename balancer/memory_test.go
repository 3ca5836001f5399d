package balancer

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// staticBytes is the default model's training state: weights, gradients, AdamW moments.
func staticBytes(job Job) float64 {
	s := 0.0
	for _, c := range job.Layers {
		s += float64(c.StaticBytes())
	}
	return s
}

// TestOnlyOffloadMakesJobFeasible: one node with less memory than the default model's
// training state. Without offload nothing fits, even recomputing; with offload auto the
// planner recomputes, offloads what is left over (no more), says so, and the simulator
// times the disk I/O: with a disk slow enough to dominate, the step is exactly the
// documented traffic over the measured bandwidths.
func TestOnlyOffloadMakesJobFeasible(t *testing.T) {
	job := defaultJob(jobspec.RecomputeAuto)
	job.Batch, job.MicroBatches = 4, 4
	static := staticBytes(job)
	snap := oneNode(0.6 * static)
	snap.Nodes[0].DiskReadBps, snap.Nodes[0].DiskWriteBps = 1e6, 0.5e6
	_, err := NewPlan(snap, job, Options{})
	if !errors.Is(err, ErrInfeasible) {
		t.Fatalf("without offload: %v, want infeasible", err)
	}
	job.Offload = jobspec.OffloadAuto
	p, err := NewPlan(snap, job, Options{})
	if err != nil {
		t.Fatalf("offload auto: %v", err)
	}
	checkPlan(t, snap, job, p)
	st := p.Replicas[0].Stages[0]
	if !st.Recompute || st.OffloadBytes <= 0 || !strings.Contains(p.Reason, "offloading") {
		t.Fatalf("stage %+v, reason %q: want recomputation and offload", st, p.Reason)
	}
	if st.MemoryBytes > float64(snap.Nodes[0].MemoryBytes) || st.MemoryBytes < float64(snap.Nodes[0].MemoryBytes)-1 {
		t.Fatalf("stage claims %.0f bytes of a %d-byte node: offload must fill memory, no more", st.MemoryBytes, snap.Nodes[0].MemoryBytes)
	}
	// The documented traffic: fraction f of weights w, gradients g, moments m on disk;
	// forward reads f·w, backward reads f·(w+g) and writes f·g, per micro-batch; the
	// optimizer reads f·(w+g+m) and writes f·(w+m) once.
	var w, g, m float64
	for _, c := range job.Layers {
		w, g, m = w+float64(c.ParamBytes), g+float64(c.GradBytes), m+float64(c.OptimizerBytes)
	}
	f := float64(st.OffloadBytes) / static
	rd, wr := snap.Nodes[0].DiskReadBps, snap.Nodes[0].DiskWriteBps
	want := 4*(f*w/rd+f*(w+g)/rd+f*g/wr) + f*(w+g+m)/rd + f*(w+m)/wr
	if got := simulated(t, snap, job, p); math.Abs(got-want) > 1e-3*want {
		t.Fatalf("simulated step %.4g s, want the disk's %.4g s", got, want)
	}
	if math.Abs(p.Predicted.Step-want) > 1e-3*want {
		t.Fatalf("predicted step %.4g s, want the disk's %.4g s", p.Predicted.Step, want)
	}
	job.Offload = jobspec.OffloadOff
	if _, err := NewPlan(snap, job, Options{}); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("offload off: %v, want infeasible", err)
	}
	t.Logf("%.1f MiB node, %.1f MiB of training state: offloads %.1f MiB, %.3g s/step at 1 MB/s; %s",
		float64(snap.Nodes[0].MemoryBytes)/(1<<20), static/(1<<20), float64(st.OffloadBytes)/(1<<20), want, p.Reason)
}

// TestRecomputeIsPerStageInPlans: equal layer counts on a large and a small node: only the
// stage on the small node, which does not fit otherwise, recomputes.
func TestRecomputeIsPerStageInPlans(t *testing.T) {
	job := defaultJob(jobspec.RecomputeOff)
	on, _ := stageNeed(t, jobspec.RecomputeOn)
	off, _ := stageNeed(t, jobspec.RecomputeOff)
	snap := Snapshot{Nodes: []Node{
		{ID: "big", GFLOPS: 50, MemoryBytes: int64(off)},
		{ID: "small", GFLOPS: 50, MemoryBytes: int64(0.55 * (on + off) / 2)},
	}}
	if _, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyEven}); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("without recomputation: %v, want infeasible", err)
	}
	job.Recompute = jobspec.RecomputeAuto
	p, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyEven})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, snap, job, p)
	st := p.Replicas[0].Stages
	if len(st) != 2 || st[0].Node != "big" || st[0].Recompute || !st[1].Recompute {
		t.Fatalf("stages %+v: want only the small node's stage recomputing", st)
	}
}

// singleLayerJob is a job of one layer (a pipeline cannot split it) with batch 2 in sync
// mode, uncompressed.
func singleLayerJob(zero int) Job {
	cfg := model.Config{Layers: 1, DModel: 64, Heads: 2, Context: 32, Vocab: 256}
	return Job{Layers: cfg.LayerCosts()[1:2], Batch: 2, Context: cfg.Context, MicroBatches: 1,
		Sync: Sync{Mode: jobspec.SyncEveryStep, Compression: 1}, Zero: zero}
}

// TestZeroMakesPlanFit: a layer whose AdamW moments do not fit beside its weights,
// gradients and activations on either node alone fits on both as two ZeRO replicas, each
// holding half the moments; without ZeRO it is infeasible.
func TestZeroMakesPlanFit(t *testing.T) {
	job := singleLayerJob(0)
	c := job.Layers[0]
	act := float64(c.SavedBytesPerToken+2*c.OutputBytesPerToken) * float64(job.Context)
	mem := float64(c.ParamBytes+c.GradBytes) + 0.6*float64(c.OptimizerBytes) + act
	snap := Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 10, MemoryBytes: int64(mem)}, {ID: "b", GFLOPS: 10, MemoryBytes: int64(mem)}}}
	if _, err := NewPlan(snap, job, Options{}); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("without ZeRO: %v, want infeasible", err)
	}
	for _, zero := range []int{1, 2} {
		job := singleLayerJob(zero)
		p, err := NewPlan(snap, job, Options{})
		if err != nil {
			t.Fatalf("zero %d: %v", zero, err)
		}
		checkPlan(t, snap, job, p)
		if len(p.Replicas) != 2 || p.Replicas[0].Stages[0].Zero != zero {
			t.Fatalf("zero %d: plan %+v, want two ZeRO replicas", zero, p.Replicas)
		}
	}
}

// TestPlannerDoesNotUseMemoryTechniquesWhenMemoryAllows: on random instances with
// recomputation and offload on auto, where any plan fits without them, auto's plan is
// exactly that plan (no recomputation, no offload); where none does, the plan fits what it
// claims using them.
func TestPlannerDoesNotUseMemoryTechniquesWhenMemoryAllows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rescued := map[string]int{}
	for i := 0; i < 60; i++ {
		snap, job := randomInstance(rng, 5, 8, 12)
		for k := range snap.Nodes {
			snap.Nodes[k].MemoryBytes = int64(float64(snap.Nodes[k].MemoryBytes) * (0.3 + 0.7*rng.Float64()))
		}
		off, errOff := NewPlan(snap, job, Options{})
		job.Recompute, job.Offload = jobspec.RecomputeAuto, jobspec.OffloadAuto
		auto, errAuto := NewPlan(snap, job, Options{})
		switch {
		case errOff == nil:
			if errAuto != nil || !reflect.DeepEqual(off, auto) {
				t.Fatalf("instance %d: a plan fits without recomputation or offload but auto planned %+v (%v)", i, auto, errAuto)
			}
		case errAuto == nil:
			checkPlan(t, snap, job, auto)
			rescued[usedTechniques(auto)]++
			if usedTechniques(auto) == "" {
				t.Fatalf("instance %d: auto fits where off does not (%v) without recomputing or offloading", i, errOff)
			}
		}
	}
	if rescued["recompute"] == 0 || rescued["offload"]+rescued["recompute+offload"] == 0 {
		t.Fatalf("rescued %v: the instances do not exercise both techniques", rescued)
	}
	t.Logf("instances feasible only with: %v", rescued)
}

func usedTechniques(p Plan) string {
	rc, off := false, false
	for _, r := range p.Replicas {
		for _, s := range r.Stages {
			rc, off = rc || s.Recompute, off || s.OffloadBytes > 0
		}
	}
	switch {
	case rc && off:
		return "recompute+offload"
	case off:
		return "offload"
	case rc:
		return "recompute"
	}
	return ""
}

// TestPlanPropertiesMemoryKnobs: random instances with random recomputation, offload and
// ZeRO settings and tight memory: every strategy's plan tiles the layers, fits the memory
// it claims (ZeRO and offload accounted), is deterministic, and simulates.
func TestPlanPropertiesMemoryKnobs(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	feasible := 0
	for i := 0; i < 80; i++ {
		snap, job := randomInstance(rng, 6, 8, 8)
		for k := range snap.Nodes {
			snap.Nodes[k].MemoryBytes = int64(float64(snap.Nodes[k].MemoryBytes) * (0.2 + 0.8*rng.Float64()))
			snap.Nodes[k].DiskReadBps = math.Pow(10, 7+2*rng.Float64())
		}
		job.Recompute = jobspec.Recomputes()[rng.IntN(3)]
		job.Offload = jobspec.Offloads()[rng.IntN(3)]
		if job.Sync.Mode == jobspec.SyncEveryStep {
			job.Sync.Compression, job.Zero = 1, rng.IntN(3)
		}
		strategies := []jobspec.Strategy{jobspec.StrategyEven, jobspec.StrategySky, jobspec.StrategyAuto}
		if len(snap.Nodes) <= 4 && len(job.Layers) <= 8 {
			strategies = append(strategies, jobspec.StrategyOptimal)
		}
		for _, s := range strategies {
			p, err := NewPlan(snap, job, Options{Strategy: s})
			if err != nil {
				if !errors.Is(err, ErrInfeasible) {
					t.Fatalf("instance %d: %s: %v", i, s, err)
				}
				continue
			}
			feasible++
			checkPlan(t, snap, job, p)
			if sim := simulated(t, snap, job, p); !(sim > 0) || math.IsInf(sim, 0) {
				t.Fatalf("instance %d: %s simulates %v s", i, s, sim)
			}
			if again, _ := NewPlan(snap, job, Options{Strategy: s}); !reflect.DeepEqual(p, again) {
				t.Fatalf("instance %d: %s is not deterministic", i, s)
			}
		}
	}
	if feasible < 80 {
		t.Fatalf("only %d feasible plans: the generator is too tight", feasible)
	}
	t.Logf("%d feasible plans checked", feasible)
}

// TestReplanUsesTheSameSearch: a two-node mesh loses a node; the survivor cannot hold the
// model, and Replan proposes a plan that offloads, fitting what it claims.
func TestReplanUsesTheSameSearch(t *testing.T) {
	job := defaultJob(jobspec.RecomputeAuto)
	job.Offload = jobspec.OffloadAuto
	static := staticBytes(job)
	both := Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 50, MemoryBytes: int64(static)}, {ID: "b", GFLOPS: 50, MemoryBytes: int64(static)}}}
	cur, err := NewPlan(both, job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if usedTechniques(cur) != "" {
		t.Fatalf("two nodes: %+v, want neither recomputation nor offload", cur.Replicas)
	}
	survivor := Snapshot{Nodes: []Node{{ID: "b", GFLOPS: 50, MemoryBytes: int64(0.7 * static)}}}
	dec, err := Replan(cur, survivor, job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, survivor, job, dec.Plan)
	if !dec.Replan || dec.Plan.Replicas[0].Stages[0].OffloadBytes <= 0 {
		t.Fatalf("replan %v: %+v, want a plan that offloads", dec.Replan, dec.Plan.Replicas)
	}
}

func TestMemoryKnobsValidate(t *testing.T) {
	job := singleLayerJob(3)
	if err := job.Validate(); err == nil || !strings.Contains(err.Error(), "zero must be 0, 1 or 2") {
		t.Fatalf("zero 3: %v", err)
	}
	job = singleLayerJob(1)
	job.Sync.Mode = jobspec.SyncDiLoCo
	if err := job.Validate(); err == nil || !strings.Contains(err.Error(), "zero 1 shards") {
		t.Fatalf("zero with DiLoCo: %v", err)
	}
	job = singleLayerJob(1)
	job.Sync.Compression = 4
	if err := job.Validate(); err == nil || !strings.Contains(err.Error(), "uncompressed") {
		t.Fatalf("zero with compression: %v", err)
	}
	job = singleLayerJob(0)
	job.Offload = "sometimes"
	if err := job.Validate(); err == nil || !strings.Contains(err.Error(), "job.offload") {
		t.Fatalf("bad offload: %v", err)
	}
	snap := oneNode(1 << 30)
	snap.Nodes[0].DiskReadBps = -1
	if _, err := NewPlan(snap, singleLayerJob(0), Options{}); err == nil || !strings.Contains(err.Error(), "disk_read_bps") {
		t.Fatalf("negative disk bandwidth: %v", err)
	}
}

// TestOffloadOnlyInOneReplica: the engine's offload store holds a pure pipeline's state
// only, so the planner never offloads in a plan of several replicas. Two nodes that each
// hold 60% of the training state, fast disks and a DiLoCo job: two offloading replicas
// would be quicker, but the plan is one replica (a two-stage pipeline, nothing offloaded,
// or one node offloading); with one node each the same job is one offloading replica.
func TestOffloadOnlyInOneReplica(t *testing.T) {
	job := defaultJob(jobspec.RecomputeAuto)
	job.Batch, job.MicroBatches, job.Offload = 16, 16, jobspec.OffloadAuto
	static := staticBytes(job)
	var snap Snapshot
	for _, id := range []string{"a", "b"} {
		snap.Nodes = append(snap.Nodes, Node{ID: id, GFLOPS: 50, MemoryBytes: int64(0.6 * static), DiskReadBps: 50e9, DiskWriteBps: 50e9})
	}
	p, err := NewPlan(snap, job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPlan(t, snap, job, p) // fails on a stage that offloads beside another replica
	if len(p.Replicas) != 1 {
		t.Fatalf("plan of %d replicas on nodes that need offload to hold the model alone", len(p.Replicas))
	}
	snap.Nodes = snap.Nodes[:1]
	if p, err = NewPlan(snap, job, Options{}); err != nil {
		t.Fatal(err)
	}
	checkPlan(t, snap, job, p)
	if st := p.Replicas[0].Stages[0]; st.OffloadBytes <= 0 || st.MemoryBudget <= 0 {
		t.Fatalf("one node: stage %+v, want it offloading", st)
	}
}
