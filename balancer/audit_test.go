package balancer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// threeNodes is three 1-GFLOP/s nodes joined by free links.
func threeNodes() Snapshot {
	var s Snapshot
	for _, id := range []string{"a", "b", "c"} {
		s.Nodes = append(s.Nodes, Node{ID: id, GFLOPS: 1, MemoryBytes: 1 << 40})
	}
	for _, x := range s.Nodes {
		for _, y := range s.Nodes {
			if x.ID != y.ID {
				s.Links = append(s.Links, Link{From: x.ID, To: y.ID, Bandwidth: 1e30})
			}
		}
	}
	return s
}

// withMemory is threeNodes with b bytes of memory each.
func withMemory(b int64) Snapshot {
	s := threeNodes()
	for i := range s.Nodes {
		s.Nodes[i].MemoryBytes = b
	}
	return s
}

// TestAuditIsPriced: an audited job's step includes each replica's expected recompute of
// the others' work, p·Σ_{j≠i} compute_i·batch_j/batch_i with p = min(1, audit/R), in the
// simulation, the estimate and its breakdown; a plan the engine does not audit (pipeline
// stages) is priced as before.
func TestAuditIsPriced(t *testing.T) {
	// 6 GFLOP per sequence (two layers of 1 forward and 2 backward GFLOP per token, one
	// token), 1 GFLOP/s: a replica of b sequences computes 6b s per step.
	job := Job{Layers: uniformLayers(2, 1e9, 4, 0), Batch: 6, Context: 1,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 10}}
	replicas := func(batches ...int) Plan {
		p := Plan{MicroBatches: 1}
		for i, b := range batches {
			p.Replicas = append(p.Replicas, Replica{Batch: b, Stages: []Stage{{Node: string(rune('a' + i)), First: 0, Last: 2}}})
		}
		return p
	}
	for _, tc := range []struct {
		name    string
		audit   float64
		plan    Plan
		want    float64
		audited bool
	}{
		{"no audit", 0, replicas(2, 2, 2), 12, false},
		// p = 1/3; each replica recomputes 2 × 2 sequences: 12 + 12·4/2/3 = 20 s.
		{"audit 1", 1, replicas(2, 2, 2), 20, true},
		// p = 1: every other member's work, 12 + 24 = 36 s.
		{"audit 3", 3, replicas(2, 2, 2), 36, true},
		{"audit over R", 64, replicas(2, 2, 2), 36, true},
		// Unequal shares: 6 + 6·5/3 = 16, 12 + 8 = 20, 18 + 6 = 24; the slowest binds.
		{"audit 1, unequal shares", 1, replicas(1, 2, 3), 24, true},
		// Two stages per replica: not audited.
		{"pipeline", 3, Plan{MicroBatches: 1, Replicas: []Replica{
			{Batch: 3, Stages: []Stage{{Node: "a", First: 0, Last: 1}, {Node: "b", First: 1, Last: 2}}},
			{Batch: 3, Stages: []Stage{{Node: "c", First: 0, Last: 2}}}}}, 18 + 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := job
			job.Sync.Audit = tc.audit
			sim, err := Simulate(threeNodes(), job, tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			if !near(sim.Step, tc.want) {
				t.Errorf("simulated step %g s, want %g", sim.Step, tc.want)
			}
			in, err := newInstance(threeNodes(), job)
			if err != nil {
				t.Fatal(err)
			}
			d, err := in.fromPlan(tc.plan)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := in.estimate(d)
			if !near(b.Step, tc.want) || !near(in.estimateStep(d), tc.want) {
				t.Errorf("estimated step %g s (alone %g), want %g", b.Step, in.estimateStep(d), tc.want)
			}
			if (b.Audit > 0) != tc.audited {
				t.Errorf("breakdown audit %g s, audited %v", b.Audit, tc.audited)
			}
		})
	}
	job.Sync.Audit = -1
	if err := job.Validate(); err == nil {
		t.Error("sync.audit −1 accepted")
	}
}

// TestAuditedJobKeepsAuditablePlans: asked for audits, auto keeps a plan whose replicas
// the engine can audit (one whole-model stage each) even where pricing the recompute
// makes a pipeline, whose stages nobody recomputes, predicted faster; without audits the
// pipeline wins on these nodes.
func TestAuditedJobKeepsAuditablePlans(t *testing.T) {
	job := Job{Layers: uniformLayers(6, 1e9, 4, 0), Batch: 12, Context: 1, MicroBatches: 12,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 10}}
	stages := func(p Plan) int {
		n := 0
		for _, r := range p.Replicas {
			n = max(n, len(r.Stages))
		}
		return n
	}
	p, err := NewPlan(threeNodes(), job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("no audit: %d replicas of up to %d stages, %.3g s/step: %s", len(p.Replicas), stages(p), p.Predicted.Step, p.Reason)
	job.Sync.Audit = 3
	pa, err := NewPlan(threeNodes(), job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("audit 3: %d replicas of up to %d stages, %.3g s/step (audit %.3g): %s", len(pa.Replicas), stages(pa), pa.Predicted.Step, pa.Predicted.Audit, pa.Reason)
	if len(pa.Replicas) < 2 || stages(pa) != 1 || !(pa.Predicted.Audit > 0) {
		t.Fatalf("audited job planned %d replicas of up to %d stages (audit %g s): want auditable one-stage replicas", len(pa.Replicas), stages(pa), pa.Predicted.Audit)
	}
}

// TestAuditWorkerMemoryIsPriced: an audited replica's node also holds its audit worker (a
// second copy of the training state); the plan counts it in each stage's memory, and
// nodes that hold one copy but not two get no audited plan, since the engine would audit
// it and overrun them.
func TestAuditWorkerMemoryIsPriced(t *testing.T) {
	job := Job{Layers: uniformLayers(6, 1e9, 4, 1<<20), Batch: 12, Context: 1, MicroBatches: 12,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 10, Audit: 3}}
	static := int64(staticBytes(job))
	audited := func(p Plan) bool {
		if len(p.Replicas) < 2 {
			return false
		}
		for _, r := range p.Replicas {
			if len(r.Stages) != 1 {
				return false
			}
		}
		return p.Predicted.Audit > 0
	}
	p, err := NewPlan(withMemory(1<<40), job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !audited(p) {
		t.Fatalf("with room: %d replicas, audit %g s; want audited one-stage replicas", len(p.Replicas), p.Predicted.Audit)
	}
	var need int64
	for _, r := range p.Replicas {
		m := int64(r.Stages[0].MemoryBytes)
		if m < 2*static {
			t.Errorf("node %s: %d bytes planned, want at least twice the model's training state %d (its audit worker)", r.Stages[0].Node, m, static)
		}
		need = max(need, m)
	}
	t.Logf("audited: %d replicas, %d bytes per node (training state %d)", len(p.Replicas), need, static)

	short, err := NewPlan(withMemory(need-1), job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if audited(short) {
		t.Errorf("a byte short of the audit worker: planned %d audited replicas needing %d bytes on nodes of %d", len(short.Replicas), int64(short.Replicas[0].Stages[0].MemoryBytes), need-1)
	}
	t.Logf("a byte short: %d replicas of %d stages: %s", len(short.Replicas), len(short.Replicas[0].Stages), short.Reason)
	// The audited plan, running, on nodes that lost a byte: infeasible, saying why and
	// what to do.
	dec, err := Replan(p, withMemory(need-1), job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !dec.Replan || !strings.Contains(dec.Reason, "audit worker") || !strings.Contains(dec.Reason, "--memory-budget") || !strings.Contains(dec.Reason, "parallel.audit") {
		t.Errorf("replan of the audited plan a byte short: replan %v, %q; want it infeasible for the audit worker, naming the remedies", dec.Replan, dec.Reason)
	}
	exact, err := NewPlan(withMemory(need), job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !audited(exact) {
		t.Errorf("with exactly the audited plan's memory: %d replicas, audit %g s; want it audited", len(exact.Replicas), exact.Predicted.Audit)
	}
}

// TestAutoAuditPlansAsUnaudited: parallel.audit "auto" places a job where it trains
// fastest unaudited, among groupings that include every node a replica of its own (three
// equal nodes get three one-stage replicas, which the usual groupings miss), with no
// trading speed for audits and no failing for want of memory; it audits that plan where
// the engine can (one-stage replicas whose nodes also hold the audit worker), priced in
// its step and memory. A pipeline, or nodes a byte short of the audit worker, run
// unaudited, priced as before.
func TestAutoAuditPlansAsUnaudited(t *testing.T) {
	layers := uniformLayers(6, 1e9, 4, 1<<20)
	static := int64(staticBytes(Job{Layers: layers}))
	shape := func(p Plan) string {
		var b strings.Builder
		for _, r := range p.Replicas {
			fmt.Fprintf(&b, "[%d:", r.Batch)
			for _, s := range r.Stages {
				fmt.Fprintf(&b, " %s %d-%d", s.Node, s.First, s.Last)
			}
			b.WriteString("]")
		}
		return b.String()
	}
	job := Job{Layers: layers, Batch: 12, Context: 1, MicroBatches: 1, Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 10}}
	auto := job
	auto.Sync.Audit, auto.Sync.AuditAuto = 1, true
	wide, err := NewPlan(withMemory(1<<40), auto, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[4: a 0-6][4: b 0-6][4: c 0-6]"; shape(wide) != want || !wide.Audited {
		t.Fatalf("three equal nodes: auto planned %s, audited %v; want %s, audited", shape(wide), wide.Audited, want)
	}
	var need int64
	for _, r := range wide.Replicas {
		need = max(need, int64(r.Stages[0].MemoryBytes))
	}
	for _, tc := range []struct {
		name    string
		mem     int64
		audited bool
	}{
		{"room for two copies", 1 << 40, true},
		{"a byte short of the audit worker", need - 1, false},
		{"no node holds the model", static * 2 / 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := newInstance(withMemory(tc.mem), job)
			if err != nil {
				t.Fatal(err)
			}
			in.everyNodeGrouping = true
			plain, err := in.planTiers(Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := NewPlan(withMemory(tc.mem), auto, Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("unaudited %s %.4g s; auto %s %.4g s (audit %.3g s), audited %v: %s", shape(plain), plain.Predicted.Step, shape(p), p.Predicted.Step, p.Predicted.Audit, p.Audited, p.Reason)
			if shape(p) != shape(plain) || p.MicroBatches != plain.MicroBatches {
				t.Fatalf("auto planned %s (%d micro-batches), unaudited %s (%d): want the same placement", shape(p), p.MicroBatches, shape(plain), plain.MicroBatches)
			}
			if p.Audited != tc.audited {
				t.Fatalf("audited %v, want %v", p.Audited, tc.audited)
			}
			step, err := PlanStep(withMemory(tc.mem), auto, p)
			if err != nil || !near(step, p.Predicted.Step) {
				t.Errorf("the plan judged running: %g s (%v), planned %g s", step, err, p.Predicted.Step)
			}
			if !tc.audited {
				if p.Predicted != plain.Predicted || p.Replicas[0].Stages[0].MemoryBytes != plain.Replicas[0].Stages[0].MemoryBytes {
					t.Errorf("an unaudited auto plan is priced %+v, the same unaudited %+v", p.Predicted, plain.Predicted)
				}
				return
			}
			if !(p.Predicted.Audit > 0) || !(p.Predicted.Step > plain.Predicted.Step) {
				t.Errorf("audited: step %g s with audit %g s, unaudited %g s: want the recompute priced", p.Predicted.Step, p.Predicted.Audit, plain.Predicted.Step)
			}
			for _, r := range p.Replicas {
				if m := int64(r.Stages[0].MemoryBytes); m < 2*static {
					t.Errorf("node %s: %d bytes planned, want at least twice the training state %d (its audit worker)", r.Stages[0].Node, m, static)
				}
			}
		})
	}
}

// TestAutoAuditDoesNotKeepJobsFromNewNodes: a job with audit auto is weighed for a replan
// as if unaudited, as it is placed: a new node that would speed it up unaudited is taken,
// and its plan audited. Priced with the audits, a slow node's replica recomputing the fast
// node's share makes the step slower than the fast node's alone (the slow replica binds),
// and the job kept away from every node slower than its own.
func TestAutoAuditDoesNotKeepJobsFromNewNodes(t *testing.T) {
	job := Job{Layers: uniformLayers(6, 1e9, 4, 1<<20), Batch: 12, Context: 1, MicroBatches: 1,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 10, Audit: 1, AuditAuto: true}}
	two := Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 1, MemoryBytes: 1 << 40}, {ID: "b", GFLOPS: 0.5, MemoryBytes: 1 << 40}},
		Links: []Link{{From: "a", To: "b", Bandwidth: 1e30}, {From: "b", To: "a", Bandwidth: 1e30}}}
	one := Snapshot{Nodes: two.Nodes[:1]}
	current, err := NewPlan(one, job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dec, err := Replan(current, two, job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; proposal audited %v, predicted %.4g s (audit %.3g s) against %.4g s", dec.Reason, dec.Plan.Audited, dec.Plan.Predicted.Step, dec.Plan.Predicted.Audit, current.Predicted.Step)
	if !dec.Replan || len(dec.Plan.Replicas) != 2 || !dec.Plan.Audited {
		t.Fatalf("replan %v to %d replicas, audited %v: want the new node used, audited", dec.Replan, len(dec.Plan.Replicas), dec.Plan.Audited)
	}
}
