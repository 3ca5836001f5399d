package balancer

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// uniformLayers is n layers of f forward and 2f backward FLOPs per token, out bytes per
// token at each boundary and the given parameter bytes.
func uniformLayers(n int, f float64, out, params int64) []model.LayerCost {
	ls := make([]model.LayerCost, n)
	for i := range ls {
		ls[i] = model.LayerCost{Name: "l", ForwardFLOPsPerToken: f, BackwardFLOPsPerToken: 2 * f,
			OutputBytesPerToken: out, ParamBytes: params}
	}
	return ls
}

func twoNodes(bw, rtt float64) Snapshot {
	return Snapshot{
		Nodes: []Node{{ID: "a", GFLOPS: 1, MemoryBytes: 1 << 40}, {ID: "b", GFLOPS: 1, MemoryBytes: 1 << 40}},
		Links: []Link{{From: "a", To: "b", Bandwidth: bw, RTT: rtt}, {From: "b", To: "a", Bandwidth: bw, RTT: rtt}},
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// One stage computes the whole batch, whatever the micro-batches: 3f FLOPs per token.
func TestSimulateOneStage(t *testing.T) {
	job := Job{Layers: uniformLayers(3, 1e9, 4, 0), Batch: 4, Context: 1}
	snap := Snapshot{Nodes: []Node{{ID: "a", GFLOPS: 1, MemoryBytes: 1 << 40}}}
	for _, m := range []int{1, 2, 4} {
		p := Plan{MicroBatches: m, Replicas: []Replica{{Batch: 4, Stages: []Stage{{Node: "a", First: 0, Last: 3}}}}}
		sim, err := Simulate(snap, job, p)
		if err != nil {
			t.Fatal(err)
		}
		if want := 4 * 3 * 3.0; !near(sim.Step, want) {
			t.Errorf("m=%d: step %g, want %g", m, sim.Step, want)
		}
	}
}

// Two equal stages with free links: both schedules take (M+S−1)(f+b).
func TestSimulatePipelineBubble(t *testing.T) {
	job := Job{Layers: uniformLayers(2, 1e9, 0, 0), Batch: 4, Context: 1}
	p := Plan{MicroBatches: 4, Replicas: []Replica{{Batch: 4, Stages: []Stage{{Node: "a", First: 0, Last: 1}, {Node: "b", First: 1, Last: 2}}}}}
	for _, sched := range []jobspec.Schedule{jobspec.Schedule1F1B, jobspec.ScheduleGPipe} {
		job.Schedule = sched
		sim, err := Simulate(twoNodes(1e30, 0), job, p)
		if err != nil {
			t.Fatal(err)
		}
		if want := (4 + 2 - 1) * 3.0; !near(sim.Step, want) {
			t.Errorf("%s: step %g, want %g", sched, sim.Step, want)
		}
	}
}

// A slow link serialises activations: the last one arrives after M transfers and the RTT/2,
// and the gradients come back the same way.
func TestSimulateSerialLink(t *testing.T) {
	job := Job{Layers: uniformLayers(2, 1e-3, 1000, 0), Batch: 4, Context: 1, Schedule: jobspec.ScheduleGPipe}
	p := Plan{MicroBatches: 4, Replicas: []Replica{{Batch: 4, Stages: []Stage{{Node: "a", First: 0, Last: 1}, {Node: "b", First: 1, Last: 2}}}}}
	sim, err := Simulate(twoNodes(1000, 0.5), job, p)
	if err != nil {
		t.Fatal(err)
	}
	// Forward: 4 × 1 s on a→b, +0.25 s; backward: 4 × 1 s on b→a, +0.25 s; compute ~0.
	if want := 8.5; math.Abs(sim.Step-want) > 1e-3 {
		t.Errorf("step %g, want ≈ %g", sim.Step, want)
	}
	if len(sim.LinkBytes) != 2 || sim.LinkBytes[0].Bytes != 4000 || sim.LinkBytes[1].Bytes != 4000 {
		t.Errorf("link bytes %+v, want 4000 each way", sim.LinkBytes)
	}
}

// Two replicas all-reduce in a ring of 2(R−1) = 2 rounds of half the compressed payload,
// amortised over the inner steps.
func TestSimulateSync(t *testing.T) {
	job := Job{Layers: uniformLayers(1, 1e-3, 0, 8000), Batch: 2, Context: 1,
		Sync: Sync{Mode: jobspec.SyncDiLoCo, InnerSteps: 10, Compression: 4}}
	p := Plan{MicroBatches: 1, Replicas: []Replica{
		{Batch: 1, Stages: []Stage{{Node: "a", First: 0, Last: 1}}},
		{Batch: 1, Stages: []Stage{{Node: "b", First: 0, Last: 1}}}}}
	sim, err := Simulate(twoNodes(100, 0.2), job, p)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * (1000/100.0 + 0.1); !near(sim.SyncPhase, want) || !near(sim.Sync, want/10) {
		t.Errorf("sync phase %g (per step %g), want %g (%g)", sim.SyncPhase, sim.Sync, want, want/10)
	}
	if sim.SyncEvent != sim.SyncPhase {
		t.Errorf("DiLoCo's sync event %g, want the whole phase %g", sim.SyncEvent, sim.SyncPhase)
	}
	dl := sim
	job.Sync = Sync{Mode: jobspec.SyncStreaming, InnerSteps: 10, Compression: 4, Fragments: 4}
	job.Layers = uniformLayers(4, 1e-3, 0, 2000)
	p.Replicas[0].Stages[0].Last, p.Replicas[1].Stages[0].Last = 4, 4
	sim, err = Simulate(twoNodes(100, 0.2), job, p)
	if err != nil {
		t.Fatal(err)
	}
	if !near(sim.SyncPhase, dl.SyncPhase) || !near(sim.Sync, dl.Sync) || !near(sim.SyncEvent, dl.SyncPhase/4) {
		t.Errorf("streaming, 4 fragments: phase %g, per step %g, event %g; want DiLoCo's %g, %g and %g ÷ 4", sim.SyncPhase, sim.Sync, sim.SyncEvent, dl.SyncPhase, dl.Sync, dl.SyncPhase)
	}
	job.Sync = Sync{Mode: jobspec.SyncEveryStep}
	sim, _ = Simulate(twoNodes(100, 0.2), job, p)
	if want := 2 * (4000/100.0 + 0.1); !near(sim.Sync, want) {
		t.Errorf("every-step sync %g, want %g", sim.Sync, want)
	}
}

// Plans that do not tile the layers or name unknown nodes are refused.
func TestSimulateRejectsBadPlans(t *testing.T) {
	job := Job{Layers: uniformLayers(2, 1, 0, 0), Batch: 2, Context: 1}
	for _, p := range []Plan{
		{MicroBatches: 1, Replicas: []Replica{{Batch: 2, Stages: []Stage{{Node: "a", First: 0, Last: 1}}}}},
		{MicroBatches: 1, Replicas: []Replica{{Batch: 2, Stages: []Stage{{Node: "z", First: 0, Last: 2}}}}},
		{MicroBatches: 1, Replicas: []Replica{{Batch: 2, Stages: []Stage{{Node: "a", First: 0, Last: 1}, {Node: "a", First: 1, Last: 2}}}}},
		{MicroBatches: 0, Replicas: []Replica{{Batch: 2, Stages: []Stage{{Node: "a", First: 0, Last: 2}}}}},
	} {
		if _, err := Simulate(twoNodes(1, 0), job, p); err == nil {
			t.Errorf("plan %+v accepted", p)
		}
	}
}

// TestTiedTableExchangeIsPriced: a tied model's head stage holds a copy of the token table
// and the end stages exchange it and its gradient each step: the estimate and the
// simulation both add the two transfers on the links between the end stages, and the head
// stage's memory the copy; a plan of one stage pays neither.
func TestTiedTableExchangeIsPriced(t *testing.T) {
	const table = 8e6
	job := Job{Layers: uniformLayers(4, 1e9, 4, 0), Batch: 4, Context: 1}
	tied := job
	tied.Layers = append([]model.LayerCost(nil), job.Layers...)
	tied.Layers[3].TiedTableBytes = table
	snap := twoNodes(1e6, 0.01)
	split := Plan{MicroBatches: 1, Replicas: []Replica{{Batch: 4, Stages: []Stage{{Node: "a", First: 0, Last: 2}, {Node: "b", First: 2, Last: 4}}}}}
	whole := Plan{MicroBatches: 1, Replicas: []Replica{{Batch: 4, Stages: []Stage{{Node: "a", First: 0, Last: 4}}}}}
	exchange := 2 * (table/1e6 + 0.005)
	for _, c := range []struct {
		name  string
		plan  Plan
		extra float64
	}{{"split", split, exchange}, {"one stage", whole, 0}} {
		plain, err := Simulate(snap, job, c.plan)
		if err != nil {
			t.Fatal(err)
		}
		withTable, err := Simulate(snap, tied, c.plan)
		if err != nil {
			t.Fatal(err)
		}
		if got := withTable.Step - plain.Step; !near(got, c.extra) {
			t.Errorf("%s: simulated exchange %g s, want %g", c.name, got, c.extra)
		}
		for _, j := range []Job{job, tied} {
			in, err := newInstance(snap, j)
			if err != nil {
				t.Fatal(err)
			}
			d, err := in.fromPlan(c.plan)
			if err != nil {
				t.Fatal(err)
			}
			if got := in.tiedExchange(d.replicas[0]); j.Layers[3].TiedTableBytes > 0 && !near(got, c.extra) || j.Layers[3].TiedTableBytes == 0 && got != 0 {
				t.Errorf("%s: estimated exchange %g s, want %g", c.name, got, c.extra)
			}
			if got := in.stageStatic(2, 4, 1) - in.stageStatic(0, 2, 1); j.Layers[3].TiedTableBytes > 0 && got != table {
				t.Errorf("%s: the head stage holds %g bytes more than the first, want the table's %g", c.name, got, table)
			}
		}
	}
}
