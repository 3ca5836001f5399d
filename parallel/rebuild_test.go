package parallel

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/kernels"
)

// rebuildSteps, rebuildInner and rebuildLost shape rebuildRun: a job of rebuildSteps steps,
// an outer step every rebuildInner, and replica A's pipeline broken after rebuildLost
// steps (mid outer period). The rebuilt stages copy at about step 16 and are admitted at
// an outer step after they are heard at one; on a loaded machine that took until the last
// outer steps of a 30-step job now and then (CI: "the rebuilt replica's contributions did
// not count", "never admitted"), so the job runs 12 steps (four outer steps) longer.
const rebuildSteps, rebuildInner, rebuildLost = 42, 3, 4

// rebuildRun is a job of two replicas of two pipeline stages each, A (a0, a1) and B (b0,
// b1), on one in-memory network. A trains rebuildLost steps and loses a stage (a1's node
// dies; a0, whose pipeline is broken, stops too): B retires both and trains on alone
// (unless A is undisturbed: then the four train to the end). When A is rebuilt, fresh workers of a0 and a1 (a restarted node, and the survivor's node
// starting over) are readmitted after step 8 and copy their layers from b0 and b1, at
// the same step, while B keeps stepping; then all four train to the end. B's state after
// every step is recorded (survivors[step][stage]); copied is each rebuilt stage's state
// right after its copy.
type rebuildResult struct {
	workers   []*Worker // b0, b1, then a0 and a1 when rebuilt
	survivors map[int][]StageState
	copied    []StageState
	stats     []CopyStats
}

// What becomes of replica A in rebuildRun.
type fate int

const (
	undisturbed    fate = iota // A never loses a stage
	dropped                    // A loses a stage and never comes back
	rebuilt                    // A loses a stage and is rebuilt from B
	rebuiltOnSpare             // the same, with spare node x in the lost a1's place
)

func rebuildRun(t *testing.T, mode jobspec.Sync, fate fate) rebuildResult {
	t.Helper()
	cfg := pipelineConfig(rebuildSteps)
	cfg.Train.MicroBatches = 2
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.Mode, cfg.Sync.InnerSteps, cfg.Sync.OuterLR, cfg.Sync.OuterMomentum = mode, rebuildInner, 0.7, 0.9
	cfg.Sync.Overlap = 0
	cfg.StallTimeout = 20 * time.Second
	// A joiner heard at one outer step is waited for at the next ones up to the grace
	// window: long enough that one slowed by a loaded machine is still admitted before the
	// end (a member on time costs no wait).
	cfg.Grace = 10 * time.Second
	plan := EvenPlan(cfg.Train.Model.NumLayers(), []string{"a0", "a1"}, []string{"b0", "b1"})
	net := NewInMemory(append(planNodes(plan), "x")...)
	t.Cleanup(net.Close)
	build := func(id string) *Worker {
		w, err := NewWorker(cfg, plan, id, net.Peer(id), testData())
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	a0, a1, b0, b1 := build("a0"), build("a1"), build("b0"), build("b1")
	stepWorkers(t, []*Worker{a0, a1, b0, b1}, rebuildLost)
	res := rebuildResult{workers: []*Worker{b0, b1}, survivors: map[int][]StageState{}}
	if fate == undisturbed {
		stepWorkers(t, []*Worker{a0, a1, b0, b1}, rebuildSteps)
		return res
	}
	for _, w := range []*Worker{b0, b1} {
		w.Retire("a0", "a1")
	}
	stepB := func() {
		stepWorkers(t, []*Worker{b0, b1}, b0.StepsDone()+1)
		res.survivors[b0.StepsDone()] = []StageState{snapshot(t, b0), snapshot(t, b1)}
	}
	for b0.StepsDone() < 8 {
		stepB()
	}
	if fate == dropped {
		for b0.StepsDone() < rebuildSteps {
			stepB()
		}
		return res
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b0.Readmit(ctx, "a0")
	var joiners []*Worker
	if fate == rebuiltOnSpare {
		b1.Substitute(ctx, "a1", "x")
		spared := plan.substitute("a1", "x")
		for _, id := range []string{"a0", "x"} {
			w, err := NewWorker(cfg, spared, id, net.Peer(id), testData())
			if err != nil {
				t.Fatal(err)
			}
			joiners = append(joiners, w)
		}
	} else {
		b1.Readmit(ctx, "a1")
		joiners = []*Worker{build("a0"), build("a1")}
	}
	sources := []string{"b0", "b1"}
	res.copied, res.stats = make([]StageState, 2), make([]CopyStats, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, w := range joiners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if res.stats[i], errs[i] = w.RebuildFrom(ctx, sources[i]); errs[i] == nil {
				res.copied[i], errs[i] = w.Snapshot()
			}
		}()
	}
	// B steps on while the rebuilt stages copy; between its steps the test waits for the
	// requests to arrive, so that none misses the step it names (on a real network an
	// outer period of steps is their margin).
	// RebuildFrom's step queries (two: they measure how fast b0 goes, rebuildLead) are
	// answered as B steps; then come the ranged requests.
	requested := func() bool { return b0.copies.count(false) == 1 && b1.copies.count(false) == 1 }
	for !requested() {
		testutil.WaitFor(t, 10*time.Second, "a0's step queries at b0, then the ranged requests at b0 and b1", func() bool {
			return b0.copies.count(true) > 0 || requested()
		})
		for b0.copies.count(true) > 0 {
			stepB()
		}
	}
	for b0.copies.count(false)+b1.copies.count(false) > 0 {
		stepB()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rebuilding stage %d: %v", i, err)
		}
	}
	all := append([]*Worker{b0, b1}, joiners...)
	stepWorkers(t, all, rebuildSteps)
	res.workers = all
	return res
}

// count is the number of step queries (query) or other requests waiting for a
// consistent step.
func (q *copyQueue) count(query bool) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, r := range q.pending {
		if r.ranged.query() == query {
			n++
		}
	}
	return n
}

func snapshot(t *testing.T, w *Worker) StageState {
	t.Helper()
	s, err := w.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// sameState requires the same tensors with the same bits in a and b (the replica's own
// tensors left out: error-feedback residuals, streaming's own weights) and the same
// optimizer step.
func sameState(t *testing.T, what string, a, b StageState) {
	t.Helper()
	if a.Step != b.Step || a.OptimizerMeta["step"] != b.OptimizerMeta["step"] {
		t.Fatalf("%s: steps %d (optimizer %s) and %d (optimizer %s)", what, a.Step, a.OptimizerMeta["step"], b.Step, b.OptimizerMeta["step"])
	}
	n := 0
	for _, pair := range [][2]map[string]*kernels.Tensor{{a.Model, b.Model}, {a.Optimizer, b.Optimizer}} {
		x, y := ownLeftOut(pair[0]), ownLeftOut(pair[1])
		if len(x) != len(y) {
			t.Fatalf("%s: %d and %d tensors", what, len(x), len(y))
		}
		for name, u := range x {
			v, ok := y[name]
			if !ok || len(v.Data) != len(u.Data) {
				t.Fatalf("%s: %s missing or of another size", what, name)
			}
			for i := range u.Data {
				if math.Float32bits(u.Data[i]) != math.Float32bits(v.Data[i]) {
					t.Fatalf("%s: %s[%d] = %v and %v", what, name, i, u.Data[i], v.Data[i])
				}
			}
			n++
		}
	}
	if n == 0 {
		t.Fatalf("%s: no tensors", what)
	}
}

func ownLeftOut(ts map[string]*kernels.Tensor) map[string]*kernels.Tensor {
	out := map[string]*kernels.Tensor{}
	for name, t := range ts {
		if !strings.Contains(name, ".ef_residual.r") && !strings.Contains(name, ".streaming_local.r") {
			out[name] = t
		}
	}
	return out
}

// TestLostStageIsRebuiltFromALiveReplica: replica A of two two-stage replicas loses a
// stage; B trains on alone, then A's two stages are rebuilt from B's while B keeps
// stepping. Both stages copy at the same outer-step boundary, each ends its copy with the
// bits of its source at that step (weights, inner moments and step, outer momentum), B's
// own training up to then is bit for bit that of the run in which A never comes back, the
// rebuilt stages are admitted, the four end with the same bits, and those differ from the
// run without A (its contributions counted after the rebuild). The same with a spare node x
// in the lost a1's place (B substitutes it in its groups).
func TestLostStageIsRebuiltFromALiveReplica(t *testing.T) {
	for _, tc := range []struct {
		mode jobspec.Sync
		fate fate
	}{{jobspec.SyncDiLoCo, rebuilt}, {jobspec.SyncStreaming, rebuilt}, {jobspec.SyncDiLoCo, rebuiltOnSpare}} {
		mode := tc.mode
		name := string(mode)
		if tc.fate == rebuiltOnSpare {
			name += "/on a spare"
		}
		t.Run(name, func(t *testing.T) {
			r := rebuildRun(t, mode, tc.fate)
			T := r.stats[0].Step
			for i, st := range r.stats {
				if st.Step != T || st.Peer != r.workers[i].tr.Self() || st.Bytes <= 0 {
					t.Fatalf("stage %d copied %+v; stage 0 copied step %d", i, st, T)
				}
				served := r.workers[i].CopiesServed()
				if len(served) != 1 || served[0].Step != T || served[0].Bytes != st.Bytes {
					t.Fatalf("%s served %+v; the rebuilt stage copied %+v", r.workers[i].tr.Self(), served, st)
				}
				sameState(t, "a rebuilt stage and its source at the copied step", r.copied[i], r.survivors[T][i])
				t.Logf("stage %d copied step %d from %s: %d bytes in %s", i, st.Step, st.Peer, st.Bytes, st.Took)
			}
			if T <= 8 || (mode == jobspec.SyncDiLoCo && T%rebuildInner != 0) {
				t.Fatalf("copied step %d: want an outer-step boundary after the rebuild began at 8", T)
			}
			without := rebuildRun(t, mode, dropped)
			for s := 9; s <= T; s++ {
				for i := range 2 {
					sameState(t, "the survivors serving a rebuild and not", r.survivors[s][i], without.survivors[s][i])
				}
			}
			for i := range 2 {
				if r.workers[2+i].Joining() {
					t.Fatalf("rebuilt stage %d was never admitted", i)
				}
				sameBits(t, "a rebuilt stage and its source at the end", workerParams(r.workers[i]), workerParams(r.workers[2+i]))
			}
			diff := 0.0
			for i := range 2 {
				end := workerParams(without.workers[i])
				for name, v := range workerParams(r.workers[i]) {
					for k := range v {
						diff = math.Max(diff, math.Abs(float64(v[k]-end[name][k])))
					}
				}
			}
			if diff == 0 {
				t.Fatal("the weights are those of the run without A: the rebuilt replica's contributions did not count")
			}
			t.Logf("validation loss at the end: undisturbed %.6f, A dropped %.6f, A rebuilt %.6f",
				evalLoss(t, rebuildRun(t, mode, undisturbed).workers[:2]), evalLoss(t, without.workers[:2]), evalLoss(t, r.workers[:2]))
		})
	}
}

// TestRangedCopyIsServedAtTheStepItNames: a source serves a ranged request at the first
// consistent step at or after the one it names, and refuses it (the joiner fails at once)
// when it took such a step before the request reached it, or for layers it does not hold.
func TestRangedCopyIsServedAtTheStepItNames(t *testing.T) {
	cfg, plan := quorumConfig(24, 3, jobspec.SyncDiLoCo)
	L := cfg.Train.Model.NumLayers()
	for _, tc := range []struct {
		name        string
		after, last int
		want        int // the step copied; 0: refused
	}{
		{"a step to come", 7, L, 9},
		{"a step passed", 4, L, 0},
		{"the next", 0, L, 9},
		{"layers it does not hold", 7, L + 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := NewInMemory(planNodes(plan)...)
			t.Cleanup(net.Close)
			build := func(id string) *Worker {
				w, err := NewWorker(cfg, plan, id, net.Peer(id), testData())
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			a, b, c := build("a"), build("b"), build("c")
			stepWorkers(t, []*Worker{a, b, c}, 3)
			a.Retire("c")
			b.Retire("c")
			stepWorkers(t, []*Worker{a, b}, 6)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			a.Readmit(ctx, "c")
			b.Readmit(ctx, "c")
			c2 := build("c")
			r := copyRequest{attempt: 5, ranged: rangedRequest{ok: true, after: tc.after, last: tc.last}}
			done := make(chan struct{})
			var st CopyStats
			var err error
			go func() {
				defer close(done)
				st, err = c2.copyFromWith(ctx, "a", r.attempt, r.appendRanged(nil))
			}()
			testutil.WaitFor(t, 10*time.Second, "the request at a", func() bool { return a.copies.count(false) == 1 })
			stepWorkers(t, []*Worker{a, b}, 9)
			<-done
			switch {
			case tc.want == 0 && err == nil:
				t.Fatalf("copied %+v; want a refusal", st)
			case tc.want == 0:
				t.Logf("refused: %v", err)
			case err != nil:
				t.Fatal(err)
			case st.Step != tc.want:
				t.Fatalf("copied step %d, want %d", st.Step, tc.want)
			}
		})
	}
}

// TestRangedCopyHoldsOnlyTheLayersAsked: a ranged copy of part of a stage holds every
// tensor of those layers' parameters (weights, moments, outer state) and nothing else; one
// of the whole stage is the whole-stage copy.
func TestRangedCopyHoldsOnlyTheLayersAsked(t *testing.T) {
	cfg, plan := quorumConfig(6, 3, jobspec.SyncDiLoCo)
	net := NewInMemory(planNodes(plan)...)
	t.Cleanup(net.Close)
	ws := make([]*Worker, 3)
	for i, id := range planNodes(plan) {
		w, err := NewWorker(cfg, plan, id, net.Peer(id), testData())
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	stepWorkers(t, ws, 3)
	w := ws[0]
	snap := snapshot(t, w)
	names := w.layerParamNames()
	enc := copyEncodings{}
	whole, wholeOpt, err := enc.of(snap, rangedRequest{}, names)
	if err != nil {
		t.Fatal(err)
	}
	first, last := w.LayerRange()
	all, allOpt, err := enc.of(snap, rangedRequest{ok: true, first: first, last: last}, names)
	if err != nil || !bytes.Equal(all, whole) || !bytes.Equal(allOpt, wholeOpt) {
		t.Fatalf("the whole stage's range differs from the whole-stage copy (%v)", err)
	}
	part, partOpt, err := enc.of(snap, rangedRequest{ok: true, first: 1, last: 2}, names)
	if err != nil {
		t.Fatal(err)
	}
	weights, moments, err := decodeStateCopy(append(part, partOpt...), len(part))
	if err != nil {
		t.Fatal(err)
	}
	if len(weights.Tensors) != len(names[1]) {
		t.Fatalf("%d weights for layer 1's %d parameters", len(weights.Tensors), len(names[1]))
	}
	for _, p := range names[1] {
		for _, name := range []string{p, p + ".exp_avg", p + ".exp_avg_sq", p + outerMomentumSuffix} {
			ts := weights.Tensors
			if name != p {
				ts = moments.Tensors
			}
			if ts[name] == nil {
				t.Fatalf("the copy of layer 1 lacks %s", name)
			}
		}
	}
	if len(moments.Tensors) != 3*len(names[1]) {
		t.Fatalf("%d optimizer tensors for layer 1's %d parameters", len(moments.Tensors), len(names[1]))
	}
}

// FuzzCopyRequest: a request from the network parses only at its sizes, with its step and
// layers bounded, and a ranged one encodes back to its bytes.
func FuzzCopyRequest(f *testing.F) {
	f.Add(binary.LittleEndian.AppendUint64(nil, 7))
	f.Add(copyRequest{attempt: 9, ranged: rangedRequest{ok: true, after: 12, first: 2, last: 5}}.appendRanged(nil))
	f.Add(copyRequest{attempt: 9, ranged: rangedRequest{ok: true}}.appendRanged(nil))
	f.Add(make([]byte, rangedRequestSize))
	f.Fuzz(func(t *testing.T, p []byte) {
		r, err := parseCopyRequest(p)
		if err != nil {
			return
		}
		switch {
		case !r.ranged.ok && len(p) != 8:
			t.Fatalf("parsed %d bytes as a whole-stage request", len(p))
		case r.ranged.ok && (r.attempt == 0 || r.ranged.after < 0 || r.ranged.after > math.MaxInt32 ||
			r.ranged.first < 0 || r.ranged.first > r.ranged.last || r.ranged.last > math.MaxInt32):
			t.Fatalf("accepted %+v", r)
		case r.ranged.ok && !bytes.Equal(r.appendRanged(nil), p):
			t.Fatalf("%x parsed as %+v, which encodes differently", p, r)
		}
	})
}

// FuzzStepAnswer: a step query's answer parses only as a header of no bytes within the
// job's steps.
func FuzzStepAnswer(f *testing.F) {
	f.Add(binary.LittleEndian.AppendUint64(make([]byte, 0, copyHeaderSize), 9), 0)
	f.Add(make([]byte, copyHeaderSize), 0)
	f.Add([]byte{1}, 0)
	f.Fuzz(func(t *testing.T, p []byte, pad int) {
		if len(p) == 8 && pad == 0 {
			p = append(p, make([]byte, 16)...)
		}
		s, err := parseStepAnswer(p, 100)
		if err == nil && (len(p) != copyHeaderSize || s < 0 || s > 100) {
			t.Fatalf("%x parsed as step %d", p, s)
		}
	})
}

// evalLoss is the validation loss of the replica whose stages are ws, in order.
func evalLoss(t *testing.T, ws []*Worker) float64 {
	t.Helper()
	var wg sync.WaitGroup
	losses, errs := make([]float64, len(ws)), make([]error, len(ws))
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			losses[i], _, errs[i] = w.Evaluate(context.Background())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return losses[len(ws)-1]
}
