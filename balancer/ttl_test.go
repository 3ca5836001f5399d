package balancer

import (
	"fmt"
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

func TestProgressWorth(t *testing.T) {
	m := ProgressModel{BatchExponent: 1, DiLoCoGain: 0, StreamingGain: 1}
	for _, c := range []struct {
		mode   jobspec.Sync
		shares []int
		want   float64
	}{
		{jobspec.SyncDiLoCo, []int{16}, 1},
		{jobspec.SyncEveryStep, []int{8, 8}, 1},
		{jobspec.SyncDiLoCo, []int{8, 8}, 0.5},
		{"", []int{4, 4, 4, 4}, 0.25},
		{jobspec.SyncStreaming, []int{8, 8}, 1},
	} {
		if got := m.Worth(c.mode, c.shares); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Worth(%q, %v) = %g, want %g", c.mode, c.shares, got, c.want)
		}
	}
	m = ProgressModel{BatchExponent: 0.5, DiLoCoGain: 0.5}
	if got, want := m.Worth(jobspec.SyncDiLoCo, []int{8, 8}), math.Sqrt(0.75); math.Abs(got-want) > 1e-12 {
		t.Errorf("β 0.5, κ 0.5, 2 replicas: worth %g, want %g", got, want)
	}
}

// syntheticCurve evaluates loss(s) = 2 + 3/(1 + s·w/50) every 25 steps to 800: a curve
// whose steps to any loss scale exactly as 1/w.
func syntheticCurve(name string, batch, replicas int, mode jobspec.Sync, w float64) LossCurve {
	c := LossCurve{Name: name, Batch: batch, Replicas: replicas, Mode: mode}
	for s := 25.0; s <= 800; s += 25 {
		c.Points = append(c.Points, [2]float64{s, 2 + 3/(1+s*w/50)})
	}
	return c
}

func TestDeriveProgressRecoversKnownLaw(t *testing.T) {
	beta, kappaD, kappaS := 0.7, 0.3, 0.6
	worth := func(b float64) float64 { return math.Pow(b/16, beta) }
	curves := []LossCurve{
		syntheticCurve("b16", 16, 1, jobspec.SyncEveryStep, 1),
		syntheticCurve("b8", 8, 1, jobspec.SyncEveryStep, worth(8)),
		syntheticCurve("b4", 4, 1, jobspec.SyncEveryStep, worth(4)),
		syntheticCurve("diloco", 8, 2, jobspec.SyncDiLoCo, worth(8*(1+kappaD))),
		syntheticCurve("streaming", 8, 2, jobspec.SyncStreaming, worth(8*(1+kappaS))),
	}
	m, err := DeriveProgress(curves)
	if err != nil {
		t.Fatal(err)
	}
	// The curves are sampled every 25 steps and interpolated linearly, hence the tolerance.
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"β", m.BatchExponent, beta}, {"κ diloco", m.DiLoCoGain, kappaD}, {"κ streaming", m.StreamingGain, kappaS}} {
		if math.Abs(c.got-c.want) > 0.03 {
			t.Errorf("%s = %.4f, want %.4f", c.name, c.got, c.want)
		}
	}
}

func TestDeriveProgressErrors(t *testing.T) {
	b16 := syntheticCurve("b16", 16, 1, jobspec.SyncEveryStep, 1)
	for _, c := range []struct {
		name   string
		curves []LossCurve
	}{
		{"no curves", nil},
		{"no smaller batch", []LossCurve{b16}},
		{"replicas do not make the reference batch", []LossCurve{b16, syntheticCurve("b8", 8, 1, "", 0.6),
			syntheticCurve("d", 4, 2, jobspec.SyncDiLoCo, 0.4)}},
		{"no shared loss", []LossCurve{b16, {Name: "flat", Batch: 8, Replicas: 1, Points: [][2]float64{{25, 9}, {50, 9}}}}},
	} {
		if _, err := DeriveProgress(c.curves); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// The embedded measurements give a model in range: the planner's exponents are derived
// from them at start, not written by hand.
func TestDefaultProgressFromMeasuredCurves(t *testing.T) {
	m, err := DeriveProgress(measuredCurves)
	if err != nil {
		t.Fatal(err)
	}
	if m != DefaultProgress {
		t.Fatalf("DefaultProgress %+v is not the measured curves' %+v", DefaultProgress, m)
	}
	if !(m.BatchExponent > 0.2 && m.BatchExponent <= 1.5) || m.DiLoCoGain < 0 || m.DiLoCoGain > 1 || m.StreamingGain < 0 || m.StreamingGain > 1 {
		t.Fatalf("implausible progress model %+v", m)
	}
	t.Logf("progress model from the measured curves: %+v; 2 DiLoCo replicas: a step is worth %.3f", m, m.Worth(jobspec.SyncDiLoCo, []int{8, 8}))
}

// testnetLike is the default testnet as the balancer sees it: two regions of two nodes
// (train GFLOP/s 115, 115, 69, 44; 20 MiB each), 1 Gbit/s and 2 ms RTT inside a region,
// wanMbit and wanRTT between them, and the default job (batch 16, DiLoCo every 50 steps,
// int8).
func testnetLike(wanMbit, wanRTT float64, mode jobspec.Sync) (Snapshot, Job) {
	var snap Snapshot
	for i, g := range []float64{115, 115, 69, 44} {
		snap.Nodes = append(snap.Nodes, Node{ID: fmt.Sprintf("node%d", i), GFLOPS: g, MemoryBytes: 20 << 20})
	}
	snap.Links = fullMesh(snap.Nodes, func(a, b int) Link {
		if a%2 == b%2 {
			return Link{RTT: 2e-3, Bandwidth: 1e9 / 8}
		}
		return Link{RTT: wanRTT, Bandwidth: wanMbit * 1e6 / 8}
	})
	cfg := model.Config{Layers: 4, DModel: 128, Heads: 4, Context: 128, Vocab: 256}
	return snap, Job{Layers: cfg.LayerCosts(), Batch: 16, Context: cfg.Context, Schedule: jobspec.Schedule1F1B,
		Sync: Sync{Mode: mode, InnerSteps: 50, Compression: 4}}
}

// withProgress runs f with DefaultProgress set to m.
func withProgress(t *testing.T, m ProgressModel) {
	old := DefaultProgress
	DefaultProgress = m
	t.Cleanup(func() { DefaultProgress = old })
}

func timeToLossOf(t *testing.T, snap Snapshot, job Job, p Plan) float64 {
	t.Helper()
	sim, err := Simulate(snap, job, p)
	if err != nil {
		t.Fatal(err)
	}
	var shares []int
	for _, r := range p.Replicas {
		shares = append(shares, r.Batch)
	}
	return sim.Step / DefaultProgress.Worth(job.Sync.Mode, shares)
}

// Auto picks the plan with the shortest time to loss among one pipeline and the regional
// replicas: with DiLoCo replicas worth their whole batch it takes the faster regional
// replicas, with replicas that progress like one of them the single pipeline; and in
// either case no forced alternative reaches the loss sooner.
func TestAutoChoosesByTimeToLoss(t *testing.T) {
	for _, c := range []struct {
		name     string
		m        ProgressModel
		replicas int
	}{
		{"replicas worth the whole batch", ProgressModel{BatchExponent: 1, DiLoCoGain: 1}, 2},
		{"replicas progress like one", ProgressModel{BatchExponent: 1, DiLoCoGain: 0}, 1},
		{"measured", DefaultProgress, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			withProgress(t, c.m)
			snap, job := testnetLike(100, 40e-3, jobspec.SyncDiLoCo)
			auto, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto})
			if err != nil {
				t.Fatal(err)
			}
			if c.replicas > 0 && len(auto.Replicas) != c.replicas {
				t.Fatalf("auto chose %d replicas, want %d: %s", len(auto.Replicas), c.replicas, auto.Reason)
			}
			got := timeToLossOf(t, snap, job, auto)
			for _, r := range []int{1, 2} {
				forced, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: r})
				if err != nil {
					t.Fatal(err)
				}
				if len(forced.Replicas) != r {
					t.Fatalf("replicas %d: plan has %d", r, len(forced.Replicas))
				}
				if alt := timeToLossOf(t, snap, job, forced); alt < got*(1-1e-9) {
					t.Errorf("%d replicas reach the loss in %.4f s per step of progress, auto's %d in %.4f", r, alt, len(auto.Replicas), got)
				}
			}
		})
	}
}

// Every-step sync trains on the whole batch whatever the split: its replicas are worth a
// full step, so the model leaves sync plans to step time alone.
func TestTimeToLossLeavesSyncToStepTime(t *testing.T) {
	withProgress(t, ProgressModel{BatchExponent: 1})
	snap, job := testnetLike(100, 40e-3, jobspec.SyncEveryStep)
	in, err := newInstance(snap, job)
	if err != nil {
		t.Fatal(err)
	}
	d := draft{replicas: []replicaDraft{{batch: 8}, {batch: 8}}}
	if got := in.timeToLoss(d, 0.5); got != 0.5 {
		t.Fatalf("sync, 2 replicas: time to loss %g per step of 0.5 s, want 0.5", got)
	}
}

// A fixed replica count above one is a count, not a bound: on a slow WAN every-step sync
// over two regional replicas is slower than one pipeline, and replicas: 2 still gets two.
func TestFixedReplicaCountIsExact(t *testing.T) {
	snap, job := testnetLike(20, 160e-3, jobspec.SyncEveryStep)
	free, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto})
	if err != nil {
		t.Fatal(err)
	}
	two, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(two.Replicas) != 2 {
		t.Fatalf("replicas 2 gave %d replicas: %s", len(two.Replicas), two.Reason)
	}
	checkPlan(t, snap, job, two)
	if len(free.Replicas) != 1 {
		t.Fatalf("auto chose %d replicas of every-step sync over a 20 Mbit/s WAN: %s", len(free.Replicas), free.Reason)
	}
	// More replicas than any grouping forms: the largest grouping below the count.
	eight, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(eight.Replicas) > 2 {
		t.Fatalf("replicas 8 on two regions gave %d replicas", len(eight.Replicas))
	}
}

// A model shape without measured curves is judged by step time alone.
func TestUnmeasuredShapeIsJudgedByStepTime(t *testing.T) {
	sc := Geo3(1)
	if _, ok := progressFor(sc.Job); ok {
		t.Fatal("geo3's 48-layer model has a progress model")
	}
	in, err := newInstance(sc.Snapshot, sc.Job)
	if err != nil {
		t.Fatal(err)
	}
	d := draft{replicas: []replicaDraft{{batch: 32}, {batch: 32}}}
	if got := in.timeToLoss(d, 1.5); got != 1.5 {
		t.Fatalf("unmeasured shape: time to loss %g for a 1.5 s step", got)
	}
	if _, ok := progressFor(Job{Layers: MeasuredShape.LayerCosts()}); !ok {
		t.Fatal("the measured shape has no progress model")
	}
}

// Noisy probes can split a region into several link clusters; a fixed count of two still
// gets two groups of whole clusters (a region's fast links inside a group), and auto
// considers them.
func TestForcedGroupingMergesClusters(t *testing.T) {
	snap, job := testnetLike(100, 40e-3, jobspec.SyncDiLoCo)
	for i, l := range snap.Links {
		if (l.From == "node1" && l.To == "node3") || (l.From == "node3" && l.To == "node1") {
			snap.Links[i].Bandwidth = 200e6 / 8 // under a quarter of 1 Gbit/s: its own cluster
		}
	}
	in, err := newInstance(snap, job)
	if err != nil {
		t.Fatal(err)
	}
	if cl := in.clusters(); len(cl) != 3 {
		t.Fatalf("clusters %v, want 3", cl)
	}
	g := in.forcedGrouping(2)
	if fmt.Sprint(g) != "[[0 2] [1 3]]" {
		t.Fatalf("forced grouping %v, want [[0 2] [1 3]]", g)
	}
	found := false
	for _, c := range in.groupings(Options{}) {
		found = found || fmt.Sprint(c) == fmt.Sprint(g)
	}
	if !found {
		t.Fatal("auto does not consider the two groups of clusters")
	}
	p, err := NewPlan(snap, job, Options{Strategy: jobspec.StrategyAuto, MaxReplicas: 2})
	if err != nil || len(p.Replicas) != 2 {
		t.Fatalf("replicas 2: %v replicas, %v", len(p.Replicas), err)
	}
	checkPlan(t, snap, job, p)
	if in.forcedGrouping(5) != nil {
		t.Fatal("5 groups of 4 nodes")
	}
}
