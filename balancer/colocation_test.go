package balancer

import (
	"math"
	"testing"
)

// hostPair is twoNodes with free links, the nodes at the given speeds on the given hosts.
func hostPair(gflopsA, gflopsB float64, hostA, hostB string) Snapshot {
	s := twoNodes(1e30, 0)
	s.Nodes[0].GFLOPS, s.Nodes[0].Host = gflopsA, hostA
	s.Nodes[1].GFLOPS, s.Nodes[1].Host = gflopsB, hostB
	return s
}

func replicaPair() Plan {
	return Plan{MicroBatches: 1, Replicas: []Replica{
		{Batch: 1, Stages: []Stage{{Node: "a", First: 0, Last: 1}}},
		{Batch: 1, Stages: []Stage{{Node: "b", First: 0, Last: 1}}}}}
}

// Two replicas on one host compute all step long, so each gets half of it: the step takes
// twice as long as on two hosts, and as long as on two unnamed (unknown) hosts.
func TestColocatedReplicasShareTheHost(t *testing.T) {
	job := Job{Layers: uniformLayers(1, 1e9, 0, 0), Batch: 2, Context: 1}
	step := func(snap Snapshot) float64 {
		t.Helper()
		sim, err := Simulate(snap, job, replicaPair())
		if err != nil {
			t.Fatal(err)
		}
		return sim.Step
	}
	apart, unknown, together := step(hostPair(1, 1, "h1", "h2")), step(hostPair(1, 1, "", "")), step(hostPair(1, 1, "h", "h"))
	if !near(apart, 3) || !near(unknown, 3) {
		t.Fatalf("apart %g s, unknown hosts %g s; want 3 s (3 GFLOP at 1 GFLOP/s)", apart, unknown)
	}
	if !near(together, 6) {
		t.Errorf("on one host: step %g s, want 6 s (each replica gets half of it)", together)
	}
	in, _ := newInstance(hostPair(1, 1, "h", "h"), job)
	d, _ := in.fromPlan(replicaPair())
	if est := in.estimateStep(d); !near(est, together) {
		t.Errorf("estimate %g s, simulation %g s: both price the same shared speeds", est, together)
	}
}

// A node slowed by emulation (2× slower on the same host: it sleeps half the time it
// computes) takes less of the host than an unslowed one. The shares are the model's fixed
// point: each node's speed is its own over its host's load while it computes.
func TestColocationFixedPoint(t *testing.T) {
	job := Job{Layers: uniformLayers(1, 1e9, 0, 0), Batch: 2, Context: 1}
	snap := hostPair(1, 0.5, "h", "h")
	snap.Nodes[1].HostShare = 0.5
	in, err := newInstance(snap, job)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := in.fromPlan(replicaPair())
	sh := in.shared(d)
	u := sh.busyFractions(d)
	for _, nd := range []int{0, 1} {
		other := 1 - nd
		load := in.hostShare[nd] + u[other]*in.hostShare[other]
		want := in.speed[nd] / math.Max(1, load)
		if math.Abs(sh.speed[nd]-want) > 0.02*want {
			t.Errorf("node %s: shared speed %.4g, want %.4g (load %.3f, the other busy %.2f of the step)", in.ids[nd], sh.speed[nd], want, load, u[other])
		}
	}
	alone := in.estimateStepAlone(d) // 6 s: b at 0.5 GFLOP/s
	if est := in.estimateStep(d); !(est > alone*1.05) || !(est < alone*1.5) {
		t.Errorf("shared step %g s; want above the unshared %g s and below the fully contended %g s", est, alone, alone*1.5)
	}
}

// Two pipeline stages on one host overlap only in the steady part of the schedule: the
// step is priced well above the unshared one, and near the two stages' compute in series
// (the model's average share is pessimistic in the fill and drain: at most 15% above).
func TestColocatedPipelineOverlapsPartly(t *testing.T) {
	job := Job{Layers: uniformLayers(2, 1e9, 0, 0), Batch: 4, Context: 1}
	p := Plan{MicroBatches: 4, Replicas: []Replica{{Batch: 4, Stages: []Stage{{Node: "a", First: 0, Last: 1}, {Node: "b", First: 1, Last: 2}}}}}
	apart, err := Simulate(hostPair(1, 1, "h1", "h2"), job, p)
	if err != nil {
		t.Fatal(err)
	}
	together, err := Simulate(hostPair(1, 1, "h", "h"), job, p)
	if err != nil {
		t.Fatal(err)
	}
	serial := 2 * 4 * 3.0 // both stages' compute, one after the other
	if !near(apart.Step, 15) || !(together.Step > 1.3*apart.Step) || !(together.Step <= serial*1.15) {
		t.Errorf("two stages: %g s on two hosts (want 15), %g s on one (want above 1.3× that and at most 1.15 × %g)", apart.Step, together.Step, serial)
	}
}

// Other programs' load on a host (Node.HostLoad, in cores) adds to each of its nodes'
// load: a node alone on a host that gave a compute-bound thread half a core (load 1)
// computes half as fast; two replicas on that host share what is left, each at a third
// (1 + 1 + the other's 1); a host without load is priced as before.
func TestHostLoadSlowsTheHostsNodes(t *testing.T) {
	job := Job{Layers: uniformLayers(1, 1e9, 0, 0), Batch: 2, Context: 1}
	step := func(snap Snapshot) float64 {
		t.Helper()
		sim, err := Simulate(snap, job, replicaPair())
		if err != nil {
			t.Fatal(err)
		}
		return sim.Step
	}
	loaded := func(snap Snapshot, e float64) Snapshot {
		for i := range snap.Nodes {
			snap.Nodes[i].HostLoad = e
		}
		return snap
	}
	if s := step(loaded(hostPair(1, 1, "h1", "h2"), 1)); !near(s, 6) {
		t.Errorf("apart, each host loaded 1 core: step %g s, want 6 s (3 GFLOP at half speed)", s)
	}
	if s := step(loaded(hostPair(1, 1, "h", "h"), 1)); !near(s, 9) {
		t.Errorf("together on a host loaded 1 core: step %g s, want 9 s (3 GFLOP at a third)", s)
	}
	for _, e := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if s := step(loaded(hostPair(1, 1, "h1", "h2"), e)); !near(s, 3) {
			t.Errorf("host load %g: step %g s, want 3 s (counted as none)", e, s)
		}
	}
}
