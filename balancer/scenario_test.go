package balancer

import (
	"math"
	"reflect"
	"sort"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// computeOptimal is the reference for acceptance 3, written apart from the planner: an
// O(k·L²) dynamic program over nodes in the given order (a node may take no layers) that
// first minimises the slowest stage's compute per sequence, then the total compute under
// that bottleneck. Memory and links are ignored: it is the pure compute optimum.
func computeOptimal(sc Scenario, order []string) (bounds []int, nodes []string, bottleneck float64) {
	speed := map[string]float64{}
	for _, n := range sc.Snapshot.Nodes {
		speed[n.ID] = n.GFLOPS * 1e9
	}
	L, k := len(sc.Job.Layers), len(order)
	pre := make([]float64, L+1)
	for i, c := range sc.Job.Layers {
		pre[i+1] = pre[i] + c.FLOPsPerToken()
	}
	cost := func(v string, j, e int) float64 { return (pre[e] - pre[j]) / speed[v] }
	solve := func(combine func(acc, c float64) float64, limit float64) ([][]float64, [][]int) {
		f, arg := make([][]float64, k+1), make([][]int, k+1)
		for i := range f {
			f[i], arg[i] = make([]float64, L+1), make([]int, L+1)
			for j := range f[i] {
				f[i][j] = math.Inf(1)
			}
		}
		f[0][0] = 0
		for i := 1; i <= k; i++ {
			for e := 0; e <= L; e++ {
				f[i][e], arg[i][e] = f[i-1][e], e
				for j := 0; j < e; j++ {
					c := cost(order[i-1], j, e)
					if c > limit || math.IsInf(f[i-1][j], 1) {
						continue
					}
					if v := combine(f[i-1][j], c); v < f[i][e] {
						f[i][e], arg[i][e] = v, j
					}
				}
			}
		}
		return f, arg
	}
	fmax, _ := solve(math.Max, math.Inf(1))
	bottleneck = fmax[k][L]
	_, arg := solve(func(a, c float64) float64 { return a + c }, bottleneck*(1+1e-12))
	bounds = []int{L}
	for i, e := k, L; i >= 1; i-- {
		if j := arg[i][e]; j < e {
			nodes = append([]string{order[i-1]}, nodes...)
			bounds = append([]int{j}, bounds...)
			e = j
		}
	}
	return bounds, nodes, bottleneck
}

// bottleneckOf is a plan's slowest stage compute per token-FLOP, as computeOptimal counts it.
func bottleneckOf(sc Scenario, p Plan) float64 {
	speed := map[string]float64{}
	for _, n := range sc.Snapshot.Nodes {
		speed[n.ID] = n.GFLOPS * 1e9
	}
	worst := 0.0
	for _, r := range p.Replicas {
		for _, st := range r.Stages {
			f := 0.0
			for _, c := range sc.Job.Layers[st.First:st.Last] {
				f += c.FLOPsPerToken()
			}
			worst = math.Max(worst, f/speed[st.Node])
		}
	}
	return worst
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Acceptance 3: on sky64, seeds 1–10, sky and auto reach the step time of the exact
// compute-optimal contiguous partition, and auto is never slower than sky.
func TestSky64ReachesComputeOptimal(t *testing.T) {
	var evenT, skyT, autoT, optT, bnRatio []float64
	for seed := uint64(1); seed <= 10; seed++ {
		sc := Sky64(seed)
		plans := map[jobspec.Strategy]Plan{}
		for _, s := range []jobspec.Strategy{jobspec.StrategyEven, jobspec.StrategySky, jobspec.StrategyAuto} {
			p, err := NewPlan(sc.Snapshot, sc.Job, Options{Strategy: s})
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, s, err)
			}
			checkPlan(t, sc.Snapshot, sc.Job, p)
			plans[s] = p
		}
		var order []string
		for _, st := range plans[jobspec.StrategyEven].Replicas[0].Stages {
			order = append(order, st.Node) // decreasing memory, as sky orders them
		}
		bounds, nodes, bn := computeOptimal(sc, order)
		ref := Plan{MicroBatches: sc.Job.Batch, Replicas: []Replica{{Batch: sc.Job.Batch}}}
		for i, v := range nodes {
			ref.Replicas[0].Stages = append(ref.Replicas[0].Stages, Stage{Node: v, First: bounds[i], Last: bounds[i+1]})
		}
		e, s, a, o := simulated(t, sc.Snapshot, sc.Job, plans[jobspec.StrategyEven]), simulated(t, sc.Snapshot, sc.Job, plans[jobspec.StrategySky]),
			simulated(t, sc.Snapshot, sc.Job, plans[jobspec.StrategyAuto]), simulated(t, sc.Snapshot, sc.Job, ref)
		if got := bottleneckOf(sc, plans[jobspec.StrategySky]); got > bn*(1+1e-9) {
			t.Errorf("seed %d: sky's bottleneck %.4g > compute-optimal %.4g", seed, got, bn)
		}
		if s > o*1.005 {
			t.Errorf("seed %d: sky simulates %.2f s, compute-optimal %.2f s", seed, s, o)
		}
		if a > s*(1+1e-9) || a > o*1.005 {
			t.Errorf("seed %d: auto simulates %.2f s, sky %.2f s, compute-optimal %.2f s", seed, a, s, o)
		}
		t.Logf("seed %2d: even %.1f s, sky %.1f s, auto %.1f s (%d replicas), compute-optimal %.1f s; bottleneck even/optimal %.3f",
			seed, e, s, a, len(plans[jobspec.StrategyAuto].Replicas), o, bottleneckOf(sc, plans[jobspec.StrategyEven])/bn)
		evenT, skyT, autoT, optT = append(evenT, e), append(skyT, s), append(autoT, a), append(optT, o)
		bnRatio = append(bnRatio, 1-bn/bottleneckOf(sc, plans[jobspec.StrategyEven]))
	}
	t.Logf("medians: even %.1f s, sky %.1f s (−%.1f%%), auto %.1f s (−%.1f%%), compute-optimal %.1f s (−%.1f%%); compute-optimal bottleneck −%.1f%% vs even",
		median(evenT), median(skyT), 100*(1-median(skyT)/median(evenT)), median(autoT), 100*(1-median(autoT)/median(evenT)),
		median(optT), 100*(1-median(optT)/median(evenT)), 100*median(bnRatio))
}

// Acceptance 4: on geo3, seeds 1–10, auto's simulated step is at most half of sky's.
func TestGeo3AutoHalvesSky(t *testing.T) {
	var skyT, autoT, evenT []float64
	for seed := uint64(1); seed <= 10; seed++ {
		sc := Geo3(seed)
		step := map[jobspec.Strategy]float64{}
		for _, s := range []jobspec.Strategy{jobspec.StrategyEven, jobspec.StrategySky, jobspec.StrategyAuto} {
			p, err := NewPlan(sc.Snapshot, sc.Job, Options{Strategy: s})
			if err != nil {
				t.Fatalf("seed %d %s: %v", seed, s, err)
			}
			checkPlan(t, sc.Snapshot, sc.Job, p)
			step[s] = simulated(t, sc.Snapshot, sc.Job, p)
		}
		if step[jobspec.StrategyAuto] > step[jobspec.StrategySky]/2 {
			t.Errorf("seed %d: auto %.2f s > half of sky's %.2f s", seed, step[jobspec.StrategyAuto], step[jobspec.StrategySky])
		}
		evenT, skyT, autoT = append(evenT, step[jobspec.StrategyEven]), append(skyT, step[jobspec.StrategySky]), append(autoT, step[jobspec.StrategyAuto])
	}
	t.Logf("geo3 medians: even %.2f s, sky %.2f s, auto %.2f s (auto/sky %.3f)", median(evenT), median(skyT), median(autoT), median(autoT)/median(skyT))
}

// The generators are deterministic and differ by seed.
func TestScenariosDeterministic(t *testing.T) {
	for _, name := range []string{ScenarioSky64, ScenarioGeo3} {
		a, _ := NewScenario(name, 3)
		b, _ := NewScenario(name, 3)
		c, _ := NewScenario(name, 4)
		if !reflect.DeepEqual(a, b) || reflect.DeepEqual(a.Snapshot, c.Snapshot) {
			t.Fatalf("%s: same seed must give the same scenario, another seed another", name)
		}
	}
	if _, err := NewScenario("nope", 1); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	sc := Sky64(1)
	if len(sc.Snapshot.Nodes) != 64 || len(sc.Job.Layers) != 162 || len(sc.Snapshot.Links) != 64*63 {
		t.Fatalf("sky64 has %d nodes, %d layers, %d links", len(sc.Snapshot.Nodes), len(sc.Job.Layers), len(sc.Snapshot.Links))
	}
	for _, n := range sc.Snapshot.Nodes {
		if n.GFLOPS <= 50 || n.GFLOPS > 100 || n.MemoryBytes <= 16*gibibyte/3 || n.MemoryBytes > 16*gibibyte {
			t.Fatalf("sky64 node %+v outside the distribution", n)
		}
	}
}
