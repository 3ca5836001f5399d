package parallel

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// quorumConfig is a DiLoCo job of three one-stage replicas with outer lr 1 and no
// momentum (an outer step leaves the replicas at the weighted mean of their weights), and
// a stall timeout short enough that a collective waiting on a lost replica fails the test
// instead of hanging it.
func quorumConfig(steps, inner int, mode jobspec.Sync) (JobConfig, Plan) {
	cfg := pipelineConfig(steps)
	cfg.Train.MicroBatches = 2
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.Mode, cfg.Sync.InnerSteps, cfg.Sync.OuterLR, cfg.Sync.OuterMomentum = mode, inner, 1, 0
	cfg.Sync.Overlap = 0
	cfg.StallTimeout = 20 * time.Second
	L := cfg.Train.Model.NumLayers()
	plan := Plan{Replicas: [][]StagePlan{{{Node: "a", Last: L}}, {{Node: "b", Last: L}}, {{Node: "c", Last: L}}},
		Batches: []int{4, 8, 4}}
	return cfg, plan
}

// stepWorkers steps each of ws, concurrently, until it has done n steps.
func stepWorkers(t *testing.T, ws []*Worker, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(ws))
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.StepsDone() < n && errs[i] == nil {
				_, errs[i] = w.Step(context.Background())
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
}

func workerParams(w *Worker) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range modelParams(w) {
		out[p.name] = p.data
	}
	return out
}

type namedParam struct {
	name string
	data []float32
}

func modelParams(w *Worker) []namedParam {
	var out []namedParam
	for _, ps := range w.runParams {
		for _, p := range ps {
			out = append(out, namedParam{p.Name, append([]float32(nil), p.Value.Data...)})
		}
	}
	return out
}

func sameBits(t *testing.T, what string, a, b map[string][]float32) {
	t.Helper()
	for name, v := range a {
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(b[name][i]) {
				t.Fatalf("%s: %s[%d] = %v and %v", what, name, i, v[i], b[name][i])
			}
		}
	}
}

// TestOuterStepGoesOnWithoutALostReplica: replica c of three stops for good after the
// first outer step. The survivors' second outer step runs by quorum without it, once the
// control plane retires it or, before that, once the grace window is over: they end with
// identical weights, the mean of their own weighted by their batches (4 and 8 sequences:
// renormalised over the quorum, not the plan's 16), and no step of theirs failed.
func TestOuterStepGoesOnWithoutALostReplica(t *testing.T) {
	for _, how := range []string{"retired", "grace"} {
		t.Run(how, func(t *testing.T) {
			cfg, plan := quorumConfig(100, 3, jobspec.SyncDiLoCo) // stopped after 6: no final step
			if how == "grace" {
				cfg.Grace = 100 * time.Millisecond
			}
			// The reference: the same plan and steps, the second outer period trained apart.
			ref := newRun(t, cfg, plan)
			stepWorkers(t, ref.Workers(), 3)
			for _, w := range ref.Workers() {
				w.cfg.Sync.InnerSteps = 1000
			}
			stepWorkers(t, ref.Workers(), 6)
			want := workerParams(ref.Workers()[0])
			other := workerParams(ref.Workers()[1])
			for name, v := range want {
				for i := range v {
					v[i] = (4*v[i] + 8*other[name][i]) / 12
				}
			}

			run := newRun(t, cfg, plan)
			a, b, c := run.Workers()[0], run.Workers()[1], run.Workers()[2]
			stepWorkers(t, run.Workers(), 3)
			if how == "retired" {
				a.Retire("c")
				b.Retire("c")
			}
			stepWorkers(t, []*Worker{a, b}, 6) // c never steps again
			if c.StepsDone() != 3 {
				t.Fatalf("c stepped to %d", c.StepsDone())
			}
			got := workerParams(a)
			sameBits(t, "survivors", got, workerParams(b))
			for name, v := range want {
				for i := range v {
					if math.Abs(float64(v[i]-got[name][i])) > 1e-6 {
						t.Fatalf("%s[%d] = %v after the quorum's outer step, the batch-weighted mean of a and b %v", name, i, got[name][i], v[i])
					}
				}
			}
		})
	}
}

// TestLateReplicaTakesTheQuorumsResult: replica c reaches the outer step after the grace
// window; a and b go on without its contribution, and c, when it gets there, takes their
// result: all three end with the same bits.
func TestLateReplicaTakesTheQuorumsResult(t *testing.T) {
	for _, mode := range []jobspec.Sync{jobspec.SyncDiLoCo, jobspec.SyncStreaming} {
		t.Run(string(mode), func(t *testing.T) {
			cfg, plan := quorumConfig(8, 3, mode)
			cfg.Grace = 50 * time.Millisecond
			run := newRun(t, cfg, plan)
			a, b, c := run.Workers()[0], run.Workers()[1], run.Workers()[2]
			stepWorkers(t, []*Worker{a, b}, 3)
			stepWorkers(t, []*Worker{c}, 3)
			sameBits(t, "a and b", workerParams(a), workerParams(b))
			sameBits(t, "a and the late c", workerParams(a), workerParams(c))
			stepWorkers(t, run.Workers(), 8) // all three on time again: the last outer step with c
			sameBits(t, "a and b at the end", workerParams(a), workerParams(b))
			sameBits(t, "a and c at the end", workerParams(a), workerParams(c))
		})
	}
}

// TestLateReplicaCountsAgainAtTheNextOuterStep: a straggler left out of one outer step's
// quorum (c, past the grace window) is a member like the others at the next one: when it
// arrives in time there, its contribution counts (the end differs from the same run with c
// late again), and the three end with the same bits either way.
func TestLateReplicaCountsAgainAtTheNextOuterStep(t *testing.T) {
	final := func(lateAgain bool) map[string][]float32 {
		cfg, plan := quorumConfig(6, 3, jobspec.SyncDiLoCo)
		cfg.Grace = 50 * time.Millisecond
		run := newRun(t, cfg, plan)
		a, b, c := run.Workers()[0], run.Workers()[1], run.Workers()[2]
		stepWorkers(t, []*Worker{a, b}, 3)
		stepWorkers(t, []*Worker{c}, 3)
		if lateAgain {
			stepWorkers(t, []*Worker{a, b}, 6)
			stepWorkers(t, []*Worker{c}, 6)
		} else {
			for _, w := range run.Workers() {
				w.cfg.Grace = 0 // every active member is waited for: c is in time
			}
			stepWorkers(t, run.Workers(), 6)
		}
		got := workerParams(a)
		sameBits(t, "a and b", got, workerParams(b))
		sameBits(t, "a and c", got, workerParams(c))
		return got
	}
	counted, leftOut := final(false), final(true)
	for name, v := range counted {
		for i := range v {
			if math.Float32bits(v[i]) != math.Float32bits(leftOut[name][i]) {
				return // c's second contribution moved the outer step
			}
		}
	}
	t.Fatal("the same weights whether the late replica was in time at the next outer step or late again: its contribution did not count")
}

// TestStragglerIsNoOffender: replica c reaches each of three outer steps in a row after
// the grace window; a and b go on without it each time and report it left out, but do not
// name it an offender (only contributions refused for what they are count), and c takes
// their result each time.
func TestStragglerIsNoOffender(t *testing.T) {
	cfg, plan := quorumConfig(9, 3, jobspec.SyncDiLoCo)
	cfg.Grace = 50 * time.Millisecond
	run := newRun(t, cfg, plan)
	a, b, c := run.Workers()[0], run.Workers()[1], run.Workers()[2]
	for k := 1; k <= OffenderAfter; k++ {
		stepWorkers(t, []*Worker{a, b}, 3*k)
		stepWorkers(t, []*Worker{c}, 3*k)
	}
	sameBits(t, "a and the late c", workerParams(a), workerParams(c))
	for _, w := range []*Worker{a, b} {
		if w.offenders.named["c"] || w.offenders.streak["c"] != 0 {
			t.Fatalf("named %v, streak %v: the straggler c counted as an offender", w.offenders.named, w.offenders.streak)
		}
	}
}

// TestOffenderWatchPassesOverLateMembers: a member left out as late neither adds to its
// streak nor starts it again.
func TestOffenderWatchPassesOverLateMembers(t *testing.T) {
	o := newOffenderWatch()
	bad, late := []Rejection{{Member: "x"}}, []Rejection{{Member: "x", Late: true}}
	for range OffenderAfter + 1 {
		if got := o.observe(late, true); got != nil {
			t.Fatalf("a late member named %v", got)
		}
	}
	for range OffenderAfter - 1 {
		o.observe(bad, true)
		o.observe(late, true) // between two refusals: the streak goes on
	}
	if got := o.observe(bad, true); fmt.Sprint(got) != "[x]" {
		t.Fatalf("named %v, want [x] after %d refusals with late syncs between them", got, OffenderAfter)
	}
}

// TestUnequalSharesAreNoOutliers: three honest replicas with batches 4, 8 and 4 (their
// contributions weighed 0.75, 1.5 and 0.75: Worker.weigh) drop nothing. The distance check
// compared the weighed contributions and dropped the replica of 8 at every outer step,
// three in a row making it an offender (the testnet's DiLoCo job failed so on
// placement.min_nodes).
func TestUnequalSharesAreNoOutliers(t *testing.T) {
	for _, mode := range []jobspec.Sync{jobspec.SyncDiLoCo, jobspec.SyncEveryStep} {
		t.Run(string(mode), func(t *testing.T) {
			cfg, plan := quorumConfig(15, 3, mode)
			run := newRun(t, cfg, plan)
			var mu sync.Mutex
			var rejected []Rejection
			var wg sync.WaitGroup
			for _, w := range run.Workers() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for w.StepsDone() < 15 {
						res, err := w.Step(context.Background())
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						rejected = append(rejected, res.Rejected...)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if len(rejected) != 0 {
				t.Fatalf("%d honest contributions dropped, first %+v", len(rejected), rejected[0])
			}
		})
	}
}

// TestQuorumNeedsAMajority: a replica alone of three, the others neither there nor
// retired, does not train on by itself: its outer step fails.
func TestQuorumNeedsAMajority(t *testing.T) {
	cfg, plan := quorumConfig(3, 3, jobspec.SyncDiLoCo)
	cfg.Grace, cfg.StallTimeout = 10*time.Millisecond, 200*time.Millisecond
	run := newRun(t, cfg, plan)
	a := run.Workers()[0]
	var err error
	for a.StepsDone() < 3 && err == nil {
		_, err = a.Step(context.Background())
	}
	if err == nil {
		t.Fatal("a replica alone of three finished an outer step")
	}
	t.Log(err)
}

// TestFinishedMemberServesItsResult: a member whose collective broke asks the others for
// their result; one that finished the outer step hands over its bits, until its next outer
// step of the same run; with none finished the ask comes back empty.
func TestFinishedMemberServesItsResult(t *testing.T) {
	net := NewInMemory("a", "b", "c")
	t.Cleanup(net.Close)
	g := Group{Members: []string{"a", "b", "c"}}
	k := roundKey{job: 1, epoch: 1, step: 5, index: 0}
	quorum := func(self string, peers *peerSet) outerQuorum {
		// A loaded machine (-race) may take a while to answer; nobody answering is the
		// second case's point, and it waits the whole window.
		q := outerQuorum{tr: net.Peer(self), g: g, k: k, peers: peers, ask: 10 * time.Second}
		q.g.Self = map[string]int{"a": 0, "b": 1, "c": 2}[self]
		return q
	}
	ctx := context.Background()
	want := []float32{1.5, -2, 3.25}
	quorum("a", newPeerSet()).serveFinished(ctx, want)
	got := make([]float32, 3)
	bPeers := newPeerSet()
	bPeers.retire("c")
	if !quorum("b", bPeers).askFinished(ctx, got) {
		t.Fatal("b got no result from a, which finished")
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("b took %v, a finished with %v", got, want)
		}
	}
	k.step = 10 // nobody finished this one
	q := quorum("b", bPeers)
	q.k, q.ask = k, 100*time.Millisecond
	if q.askFinished(ctx, got) {
		t.Fatal("b took a result of an outer step nobody finished")
	}
}
