package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// member is a live node with a measured profile of gflops and 1 GiB, linked to every
// other node of ids at 1 ms and 1 Gbit/s.
func member(id string, gflops float64, ids ...string) Member {
	p := &Profile{GFLOPS: gflops, MemoryBytes: 1 << 30}
	for _, o := range ids {
		if o != id {
			p.Links = append(p.Links, Link{Peer: o, RTTSeconds: 0.001, BandwidthBps: 125e6})
		}
	}
	return Member{ID: id, State: MemberAlive, Profile: p}
}

// members are live nodes with the same speed, linked to each other.
func members(ids ...string) []Member {
	var out []Member
	for _, id := range ids {
		out = append(out, member(id, 100, ids...))
	}
	return out
}

// with returns ms with the member id set to state.
func with(ms []Member, id string, state MemberState) []Member {
	out := append([]Member(nil), ms...)
	for i := range out {
		if out[i].ID == id {
			out[i].State = state
		}
	}
	return out
}

func spec() jobspec.Spec {
	s := jobspec.DefaultSpec()
	s.Parallel.Stages, s.Parallel.Replicas = jobspec.Fixed(3), jobspec.Fixed(1)
	return s
}

// running is job "j" running under the plan the scheduler makes on ms, at epoch 1.
func running(t *testing.T, s jobspec.Spec, ms []Member) Job {
	t.Helper()
	jp, err := PlanJob(s, ms, Config{})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return Job{ID: "j", Spec: s, Status: jobspec.JobRunning, Epoch: 1, Plan: &jp}
}

// ckpt is a complete checkpoint of step, every file held by each of holders.
func ckpt(s jobspec.Spec, epoch uint64, step int, holders ...string) Checkpoint {
	n := ModelConfig(s).NumLayers()
	c := Checkpoint{Epoch: epoch, Step: step}
	for _, h := range holders {
		for _, k := range []string{FileModel, FileOptimizer} {
			c.Files = append(c.Files, CheckpointFile{Kind: k, Node: h, Layers: [2]int{0, n - 1}, Hash: fmt.Sprintf("%s-%s-%d", k, h, step)})
		}
	}
	return c
}

// decision runs one round on h and returns its only decision, failing unless there is
// exactly one.
func decision(t *testing.T, h *Harness, s *Scheduler) Decision {
	t.Helper()
	ds, err := h.Process(context.Background(), s)
	if err != nil {
		t.Fatalf("process: %v", err)
	}
	if len(ds) != 1 {
		t.Fatalf("%d decisions %+v, want 1", len(ds), ds)
	}
	return ds[0]
}

// decisionTest is one case of TestDecisions: a harness, and the one decision it must make.
type decisionTest struct {
	name       string
	setup      func(t *testing.T) *Harness
	kind       DecisionKind
	reason     string // a part of the decision's reason
	resume     int    // the new epoch's ResumeStep
	commits    []string
	notOnNodes []string // nodes the new plan must not use
}

// abc are three live, equal, linked nodes.
var abc = members("a", "b", "c")

// decisionTests are every decision the scheduler makes.
var decisionTests = []decisionTest{{
	name: "submitted job is planned and marked running",
	setup: func(t *testing.T) *Harness {
		return &Harness{SelfID: "a", MemberList: abc, JobList: []Job{{ID: "j", Spec: spec(), Status: jobspec.JobSubmitted}}}
	},
	kind:    DecisionPlan,
	commits: []string{"status j planning: planning", "plan j epoch 1", "status j running: epoch 1"},
}, {
	name: "job stranded in planning by a leader change is planned again",
	setup: func(t *testing.T) *Harness {
		return &Harness{SelfID: "b", MemberList: abc, JobList: []Job{{ID: "j", Spec: spec(), Status: jobspec.JobPlanning}}}
	},
	kind:    DecisionPlan,
	commits: []string{"plan j epoch 1", "status j running: epoch 1"},
}, {
	name: "no feasible plan fails the job",
	setup: func(t *testing.T) *Harness {
		s := spec()
		s.Placement.MinNodes = 5
		return &Harness{SelfID: "a", MemberList: abc, JobList: []Job{{ID: "j", Spec: s, Status: jobspec.JobSubmitted}}}
	},
	kind:    DecisionFail,
	reason:  "no feasible plan: placement.min_nodes: 3 nodes can run the job",
	commits: []string{"status j planning", "status j failed: no feasible plan"},
}, {
	name: "dead, suspect and unprofiled members are not planned on",
	setup: func(t *testing.T) *Harness {
		ms := with(with(members("a", "b", "c", "d"), "c", MemberDead), "d", MemberSuspect)
		ms = append(ms, Member{ID: "e", State: MemberAlive})
		s := spec()
		s.Parallel.Stages = jobspec.Auto()
		return &Harness{SelfID: "a", MemberList: ms, JobList: []Job{{ID: "j", Spec: s, Status: jobspec.JobSubmitted}}}
	},
	kind:       DecisionPlan,
	notOnNodes: []string{"c", "d", "e"},
}, {
	name: "node loss resumes from the latest checkpoint that live nodes hold",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), abc)
		victim := j.Plan.Nodes()[1]
		j.Checkpoints = []Checkpoint{ckpt(j.Spec, 1, 100, "a", "b", "c")}
		return &Harness{SelfID: "a", MemberList: with(abc, victim, MemberDead), JobList: []Job{j}}
	},
	kind:    DecisionReplan,
	reason:  "is dead; resume from step 100",
	resume:  100,
	commits: []string{"plan j epoch 2", "event j replan epoch 2 step 100"},
}, {
	name: "node loss before any checkpoint restarts from step 0",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), abc)
		return &Harness{SelfID: "a", MemberList: with(abc, j.Plan.Nodes()[1], MemberDead), JobList: []Job{j}}
	},
	kind:   DecisionReplan,
	reason: "resume from step 0",
}, {
	name: "checkpoint whose holders are lost is skipped for an older one",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), abc)
		victim := j.Plan.Nodes()[1]
		j.Checkpoints = []Checkpoint{ckpt(j.Spec, 1, 100, "a", "b", "c"), ckpt(j.Spec, 1, 200, victim)}
		return &Harness{SelfID: "a", MemberList: with(abc, victim, MemberDead), JobList: []Job{j}}
	},
	kind:   DecisionReplan,
	reason: "resume from step 100",
	resume: 100,
}, {
	name: "the old leader's loss is a node loss for the new leader",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), abc)
		old, next := j.Plan.Nodes()[0], j.Plan.Nodes()[1]
		return &Harness{SelfID: next, MemberList: with(abc, old, MemberDead), JobList: []Job{j}}
	},
	kind:   DecisionReplan,
	reason: "is dead",
}, {
	name: "a failed worker of the current epoch replans",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), abc)
		j.Events = []Event{{Kind: jobspec.EventWorkerFailed, Epoch: 1, Step: 7, Message: "b after step 7: stream reset"}}
		return &Harness{SelfID: "a", MemberList: abc, JobList: []Job{j}}
	},
	kind:   DecisionReplan,
	reason: "a worker failed: b after step 7: stream reset; resume from step 0",
}, {
	name: "restart limit fails the job",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), abc)
		for range DefaultMaxRestarts {
			j.Events = append(j.Events, Event{Kind: jobspec.EventReplan})
		}
		return &Harness{SelfID: "a", MemberList: with(abc, j.Plan.Nodes()[1], MemberDead), JobList: []Job{j}}
	},
	kind:    DecisionFail,
	reason:  "gave up after 5 restarts: node ",
	commits: []string{"status j failed: gave up after 5 restarts"},
}, {
	name: "no plan after a loss fails the job",
	setup: func(t *testing.T) *Harness {
		s := spec()
		s.Placement.MinNodes = 3
		j := running(t, s, abc)
		return &Harness{SelfID: "a", MemberList: with(abc, "c", MemberDead), JobList: []Job{j}}
	},
	kind:   DecisionFail,
	reason: "no feasible plan after a failure: placement.min_nodes",
}, {
	name: "growth onto a fast joined node is accepted with its reason",
	setup: func(t *testing.T) *Harness {
		s := spec()
		s.Parallel.Stages = jobspec.Auto()
		j := running(t, s, members("a"))
		j.Checkpoints = []Checkpoint{ckpt(s, 1, 100, "a")}
		ms := []Member{member("a", 10, "a", "b"), member("b", 1000, "a", "b")}
		return &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j}}
	},
	kind:    DecisionRebalance,
	reason:  "1 node(s) joined (b)",
	resume:  100,
	commits: []string{"plan j epoch 2", "event j rebalance epoch 2 step 100"},
}, {
	name: "growth is declined before a checkpoint exists",
	setup: func(t *testing.T) *Harness {
		j := running(t, spec(), members("a"))
		return &Harness{SelfID: "a", MemberList: members("a", "b"), JobList: []Job{j}}
	},
	kind:   DecisionDecline,
	reason: "no growth: no checkpoint",
}, {
	name: "growth onto a slow joined node is declined by the balancer's margin",
	setup: func(t *testing.T) *Harness {
		s := spec()
		s.Parallel.Stages, s.Parallel.Replicas = jobspec.Auto(), jobspec.Auto()
		j := running(t, s, []Member{member("a", 1000, "a")})
		j.Checkpoints = []Checkpoint{ckpt(s, 1, 100, "a")}
		ms := []Member{member("a", 1000, "a", "b"), member("b", 1, "a", "b")}
		return &Harness{SelfID: "a", MemberList: ms, JobList: []Job{j}}
	},
	kind:   DecisionDecline,
	reason: "no growth: ",
}}

func TestDecisions(t *testing.T) {
	for _, tc := range decisionTests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.setup(t)
			h.Clock = t0
			d := decision(t, h, New(Config{}))
			if d.Kind != tc.kind || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("decision %s %q, want %s containing %q", d.Kind, d.Reason, tc.kind, tc.reason)
			}
			if d.Plan != nil && d.Plan.ResumeStep != tc.resume {
				t.Errorf("resume step %d, want %d", d.Plan.ResumeStep, tc.resume)
			}
			for _, n := range tc.notOnNodes {
				if d.Plan.Has(n) {
					t.Errorf("plan %+v uses %s", d.Plan.Replicas, n)
				}
			}
			checkCommits(t, h.Commits, tc.commits)
			if !d.Commits() && len(h.Commits) != 0 {
				t.Errorf("a %s committed %v", d.Kind, h.Commits)
			}
		})
	}
}

// checkCommits checks that each commit starts with the wanted prefix, in order.
func checkCommits(t *testing.T, got, want []string) {
	t.Helper()
	if want == nil {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("commits %q, want %d starting %q", got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("commit %d %q, want it to start %q", i, got[i], want[i])
		}
	}
}

func TestNoDecision(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T) *Harness
	}{
		{"healthy job without joined nodes", func(t *testing.T) *Harness {
			return &Harness{SelfID: "a", MemberList: abc, JobList: []Job{running(t, spec(), abc)}}
		}},
		{"suspect node is not a loss", func(t *testing.T) *Harness {
			j := running(t, spec(), abc)
			return &Harness{SelfID: "a", MemberList: with(abc, j.Plan.Nodes()[1], MemberSuspect), JobList: []Job{j}}
		}},
		{"a failed worker of an older epoch is history", func(t *testing.T) *Harness {
			j := running(t, spec(), abc)
			j.Epoch = 2
			j.Events = []Event{{Kind: jobspec.EventWorkerFailed, Epoch: 1}}
			return &Harness{SelfID: "a", MemberList: abc, JobList: []Job{j}}
		}},
		{"terminal and undecodable jobs are left alone", func(t *testing.T) *Harness {
			j := running(t, spec(), abc)
			dead := with(abc, j.Plan.Nodes()[1], MemberDead)
			done, failed, cancelled, broken := j, j, j, j
			done.Status, failed.Status, cancelled.Status, broken.Plan = jobspec.JobDone, jobspec.JobFailed, jobspec.JobCancelled, nil
			return &Harness{SelfID: "a", MemberList: dead, JobList: []Job{done, failed, cancelled, broken}}
		}},
		{"this node is never dead to itself", func(t *testing.T) *Harness {
			j := running(t, spec(), abc)
			self := j.Plan.Nodes()[0]
			return &Harness{SelfID: self, MemberList: with(abc, self, MemberDead), JobList: []Job{j}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.setup(t)
			h.Clock = t0
			ds, err := h.Process(context.Background(), New(Config{}))
			if err != nil || len(ds) != 0 || len(h.Commits) != 0 {
				t.Fatalf("decisions %+v, commits %v, err %v: want none", ds, h.Commits, err)
			}
		})
	}
}

// TestGrowthIsWeighedOncePerInterval: with the clock injected, a declined growth is not
// weighed again before GrowthInterval has passed, and is after.
func TestGrowthIsWeighedOncePerInterval(t *testing.T) {
	j := running(t, spec(), members("a"))
	h := &Harness{SelfID: "a", MemberList: members("a", "b"), JobList: []Job{j}, Clock: t0}
	s := New(Config{GrowthInterval: time.Minute})
	for _, step := range []struct {
		after time.Duration
		want  int
	}{{0, 1}, {30 * time.Second, 0}, {59 * time.Second, 0}, {time.Minute, 1}} {
		h.Clock = t0.Add(step.after)
		if ds := s.Evaluate(h); len(ds) != step.want {
			t.Errorf("at +%s: %d decisions, want %d", step.after, len(ds), step.want)
		}
	}
}

// TestReplanThenFinishRounds runs rounds on one harness: a node dies, the job gets epoch 2
// without it, and the next round, with the new plan healthy, decides nothing more.
func TestReplanThenFinishRounds(t *testing.T) {
	j := running(t, spec(), abc)
	victim := j.Plan.Nodes()[1]
	h := &Harness{SelfID: "a", MemberList: with(abc, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	if d := decision(t, h, s); d.Kind != DecisionReplan || d.Plan.Has(victim) {
		t.Fatalf("first round: %s on %v", d.Kind, d.Plan.Nodes())
	}
	if ds, _ := h.Process(context.Background(), s); len(ds) != 0 {
		t.Fatalf("second round decided %+v", ds)
	}
	if got := h.JobList[0]; got.Epoch != 2 || len(got.Events) != 1 || got.Events[0].Kind != jobspec.EventReplan {
		t.Errorf("job after the rounds: epoch %d events %+v", got.Epoch, got.Events)
	}
}

// TestApplyReturnsWriteErrors: a failed write is returned with the job named, never dropped.
func TestApplyReturnsWriteErrors(t *testing.T) {
	boom := errors.New("not the leader")
	h := &Harness{SelfID: "a", MemberList: members("a"), JobList: []Job{{ID: "j", Spec: spec(), Status: jobspec.JobSubmitted}}, FailWrites: boom}
	_, err := h.Process(context.Background(), New(Config{}))
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "job j") {
		t.Fatalf("err %v, want %v naming job j", err, boom)
	}
}

// TestPlanTheEngineRejectsFailsTheJob: a balancer plan that the engine's check rejects is
// no plan: the job fails with the check's reason.
func TestPlanTheEngineRejectsFailsTheJob(t *testing.T) {
	h := &Harness{SelfID: "a", MemberList: abc, JobList: []Job{{ID: "j", Spec: spec(), Status: jobspec.JobSubmitted}}, Clock: t0}
	reject := func(p JobPlan, numLayers int) error {
		return fmt.Errorf("replica 0 covers %d of %d layers", numLayers-1, numLayers)
	}
	d := decision(t, h, New(Config{CheckPlan: reject}))
	if d.Kind != DecisionFail || !strings.Contains(d.Reason, "no feasible plan: replica 0 covers") {
		t.Fatalf("decision %s %q, want a failure with the check's reason", d.Kind, d.Reason)
	}
}

// TestLostReplicaContinuesInPlace: a node of one DiLoCo replica of three dies: the job
// gets an epoch that continues in place with the two whole replicas (their batch shares
// kept), no checkpoint to resume from, no replan event and no restart counted. A
// sync-mode job of three replicas, or a DiLoCo job whose replicas all lost a node, is
// replanned from a checkpoint as before.
func TestLostReplicaContinuesInPlace(t *testing.T) {
	diloco := spec()
	diloco.Parallel.Stages, diloco.Parallel.Replicas, diloco.Parallel.Sync = jobspec.Fixed(1), jobspec.Fixed(3), jobspec.SyncDiLoCo
	j := running(t, diloco, abc)
	j.Plan.Batches = []int{2, 4, 6}
	victim := j.Plan.Replicas[1][0].Node
	h := &Harness{SelfID: j.Plan.Replicas[0][0].Node, MemberList: with(abc, victim, MemberDead), JobList: []Job{j}, Clock: t0}
	s := New(Config{})
	d := decision(t, h, s)
	if d.Kind != DecisionContinue || !d.Plan.Continues || d.Plan.Has(victim) || len(d.Plan.Replicas) != 2 || d.Event != nil {
		t.Fatalf("decision %s continues=%v on %v, event %+v; want to continue in place without %s", d.Kind, d.Plan.Continues, d.Plan.Nodes(), d.Event, victim)
	}
	if fmt.Sprint(d.Plan.Batches) != "[2 6]" || d.Plan.Replicas[0][0] != j.Plan.Replicas[0][0] || d.Plan.Replicas[1][0] != j.Plan.Replicas[2][0] {
		t.Fatalf("continued plan %+v batches %v: the survivors' stages and shares must stay", d.Plan.Replicas, d.Plan.Batches)
	}
	if got := h.JobList[0]; got.Epoch != 2 || len(got.Events) != 0 {
		t.Errorf("job after the round: epoch %d events %+v, want epoch 2 and no replan", got.Epoch, got.Events)
	}
	if ds, _ := h.Process(context.Background(), s); len(ds) != 0 {
		t.Fatalf("second round decided %+v", ds)
	}

	sync := diloco
	sync.Parallel.Sync = jobspec.SyncEveryStep
	js := running(t, sync, abc)
	h = &Harness{SelfID: js.Plan.Replicas[0][0].Node, MemberList: with(abc, js.Plan.Replicas[1][0].Node, MemberDead), JobList: []Job{js}, Clock: t0}
	if d := decision(t, h, New(Config{})); d.Kind != DecisionReplan {
		t.Errorf("sync mode: %s, want a replan from a checkpoint", d.Kind)
	}
}
