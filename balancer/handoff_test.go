package balancer

import (
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// threeStagesOverSlowLinks is a pipeline a → b → c whose every micro-batch computes for
// 0.1 s on each stage (1/3 forward, 2/3 backward) and whose every activation and gradient
// takes 0.1 s to serialise on links of 100 ms RTT.
func threeStagesOverSlowLinks(sched jobspec.Schedule) (Snapshot, Job, Plan) {
	nodes := []Node{{ID: "a", GFLOPS: 1, MemoryBytes: 1 << 40}, {ID: "b", GFLOPS: 1, MemoryBytes: 1 << 40}, {ID: "c", GFLOPS: 1, MemoryBytes: 1 << 40}}
	var links []Link
	for _, p := range [][2]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "b"}, {"a", "c"}, {"c", "a"}} {
		links = append(links, Link{From: p[0], To: p[1], Bandwidth: 1e6, RTT: 0.1})
	}
	job := Job{Layers: uniformLayers(3, 1e8/3, 1e5, 0), Batch: 8, Context: 1, Schedule: sched}
	plan := Plan{MicroBatches: 8, Replicas: []Replica{{Batch: 8, Stages: []Stage{
		{Node: "a", First: 0, Last: 1}, {Node: "b", First: 1, Last: 2}, {Node: "c", First: 2, Last: 3}}}}}
	return Snapshot{Nodes: nodes, Links: links}, job, plan
}

// The worker hands its outputs to the transport inline (parallel.Worker.send), so a stage
// sending both ways is busy per micro-batch for its compute and both serialisations: the
// middle stage alone takes 8 × (0.1 + 2 × 0.1) s, plus its first activation's arrival
// (a's first forward pass, one serialisation and 50 ms) and its last gradient's trip back
// (50 ms and a's last backward pass). The simulator and the closed form both charge it;
// priced with the links only overlapping compute, the step came out near 8 × 0.1 s plus
// the fill, 2–3× short, as the quick start's first plans across its emulated WAN were.
func TestBlockingSendsArePriced(t *testing.T) {
	for _, sched := range []jobspec.Schedule{jobspec.Schedule1F1B, jobspec.ScheduleGPipe} {
		snap, job, plan := threeStagesOverSlowLinks(sched)
		sim, err := Simulate(snap, job, plan)
		if err != nil {
			t.Fatal(err)
		}
		lower := 8*(0.1+2*0.1) + (0.1/3 + 0.1 + 0.05) + (0.05 + 0.2/3)
		if sim.Step < lower-1e-9 {
			t.Errorf("%s: simulated step %.3f s, want at least the middle stage's %.3f s", sched, sim.Step, lower)
		}
		in, err := newInstance(snap, job)
		if err != nil {
			t.Fatal(err)
		}
		d, err := in.fromPlan(plan)
		if err != nil {
			t.Fatal(err)
		}
		b, reason := in.estimate(d)
		if b.Step < 0.9*sim.Step || b.Step > 1.1*sim.Step {
			t.Errorf("%s: estimated step %.3f s, simulated %.3f s: want within 10%%", sched, b.Step, sim.Step)
		}
		t.Logf("%s: simulated %.3f s, estimated %.3f s (%s), lower bound %.3f s", sched, sim.Step, b.Step, reason, lower)
	}
}
