package parallel

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// streamingConfig is a streaming job of steps steps: F fragments, H inner steps, overlap τ.
func streamingConfig(steps, F, H, tau int) JobConfig {
	cfg := pipelineConfig(steps)
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.Mode, cfg.Sync.Fragments, cfg.Sync.InnerSteps, cfg.Sync.Overlap = jobspec.SyncStreaming, F, H, tau
	return cfg
}

func stepTo(t *testing.T, run *LocalRun, n int) {
	t.Helper()
	for run.StepsDone() < n {
		if _, err := run.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStreamingAveragesEachFragmentExactly: with outer lr 1, no momentum and no overlap, a
// fragment's synchronisation leaves every replica at the plain mean of the replicas'
// weights of that fragment's layers, and leaves the other fragments as each replica had
// them. The reference takes the same steps and its last one without any synchronisation.
// Fragment 1 (layers 2–3) syncs after step 2, fragment 0 (layers 0–1) after step 4; the
// replicas are cut across the fragments' boundary differently.
func TestStreamingAveragesEachFragmentExactly(t *testing.T) {
	cfg := streamingConfig(20, 2, 4, 0)
	cfg.Sync.OuterLR, cfg.Sync.OuterMomentum = 1, 0
	L := cfg.Train.Model.NumLayers()
	plan := func(p string) Plan { return twoReplicas(p, L, 1, 3) }
	for _, c := range []struct {
		at     int
		synced func(layer int) bool
	}{{2, func(l int) bool { return l >= 2 }}, {4, func(l int) bool { return l < 2 }}} {
		streamed := newRun(t, cfg, plan("s"))
		stepTo(t, streamed, c.at)
		ref := newRun(t, cfg, plan("r"))
		stepTo(t, ref, c.at-1)
		for _, w := range ref.Workers() {
			w.cfg.Sync.Mode = "" // the last step without synchronisation
		}
		stepTo(t, ref, c.at)
		a, b := replicaParams(ref, 0), replicaParams(ref, 1)
		if spread := maxDiff(a, b); spread < 1e-5 {
			t.Fatalf("replicas trained apart differ by at most %g", spread)
		}
		for r := range 2 {
			own := replicaParams(ref, r)
			for name, v := range replicaParams(streamed, r) {
				for i := range v {
					want := own[name][i]
					if c.synced(layerOf(name)) {
						want = (a[name][i] + b[name][i]) / 2
					}
					if math.Abs(float64(v[i]-want)) > 1e-6 {
						t.Fatalf("after step %d replica %d %s[%d] = %v, want %v", c.at, r, name, i, v[i], want)
					}
				}
			}
		}
	}
}

// layerOf is the layer index of a GPT-2 parameter name of the 2-block test model:
// embeddings 0, blocks 1–2, final norm and head 3.
func layerOf(name string) int {
	switch {
	case strings.HasPrefix(name, "transformer.wte"), strings.HasPrefix(name, "transformer.wpe"):
		return 0
	case strings.HasPrefix(name, "transformer.h.0."):
		return 1
	case strings.HasPrefix(name, "transformer.h.1."):
		return 2
	}
	return 3
}

func maxDiff(a, b map[string][]float32) float64 {
	var d float64
	for name, v := range a {
		for i := range v {
			d = math.Max(d, math.Abs(float64(v[i]-b[name][i])))
		}
	}
	return d
}

func newRun(t *testing.T, cfg JobConfig, plan Plan) *LocalRun {
	t.Helper()
	net := NewInMemory(planNodes(plan)...)
	t.Cleanup(net.Close)
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestStreamingEndsWithIdenticalReplicas: with overlap (τ = 2, α = 0.5) and int8 with
// error feedback, the replicas differ mid-run and are identical after the last step, where
// a fragment still in flight (sent after step 8) is completed and every fragment synced.
// Each sync event moves a fragment, not the model: fewer bytes than the final full sync.
func TestStreamingEndsWithIdenticalReplicas(t *testing.T) {
	cfg := streamingConfig(10, 3, 6, 2)
	cfg.Sync.Codec = jobspec.CodecInt8
	L := cfg.Train.Model.NumLayers()
	run := newRun(t, cfg, twoReplicas("a", L, 2, 3))
	var events []int64
	last := int64(0)
	for run.StepsDone() < cfg.Train.Steps {
		stepTo(t, run, run.StepsDone()+1)
		_, sent := run.BytesSent()
		events, last = append(events, sent-last), sent
		if run.StepsDone() == 9 && maxDiff(replicaParams(run, 0), replicaParams(run, 1)) == 0 {
			t.Fatal("replicas agree mid-run: nothing trains locally")
		}
		// With τ = 2 one fragment or another is in flight from step 2 to the end.
		inFlight := run.StepsDone() >= 2 && run.StepsDone() < cfg.Train.Steps
		for _, w := range run.Workers() {
			if w.Consistent() == inFlight {
				t.Fatalf("after step %d Consistent() = %v, fragment in flight %v", run.StepsDone(), w.Consistent(), inFlight)
			}
		}
	}
	assertReplicasEqual(t, run)
	final := events[len(events)-1]
	for s, b := range events[:len(events)-1] {
		if b >= final {
			t.Fatalf("sync bytes after step %d: %d, the final sync of every fragment %d", s+1, b, final)
		}
	}
	t.Logf("sync bytes per step: %v", events)
}

// TestStreamingRestoreContinuesExactly: snapshots taken between fragments' flights (after
// step 5: fragment 0 sent after step 4 arrived after step 5) restore into other nodes and
// continue with the uninterrupted run's losses bit for bit, with overlap, mixing and int8
// error feedback: the snapshot's model is the global weights, and each replica's own
// weights, residuals and the outer momentum travel with its optimizer state.
func TestStreamingRestoreContinuesExactly(t *testing.T) {
	cfg := streamingConfig(12, 2, 4, 1)
	cfg.Sync.Codec = jobspec.CodecInt8
	L := cfg.Train.Model.NumLayers()
	plan := func(p string) Plan { return twoReplicas(p, L, 1, 3) }
	full, _ := runLocal(t, cfg, plan("u"))

	first := newRun(t, cfg, plan("a"))
	stepTo(t, first, 4)
	if first.Workers()[0].Consistent() {
		t.Fatal("fragment 0 is in flight after step 4, yet worker 0 says it is consistent")
	}
	stepTo(t, first, 5)
	if !first.Workers()[0].Consistent() {
		t.Fatal("no fragment is in flight after step 5, yet worker 0 is not consistent")
	}
	weights, moments := snapshots(first)
	if _, ok := moments[1].Tensors["transformer.wte.weight"+localSuffix(1)]; !ok {
		t.Fatal("the snapshot lacks replica 1's own weights")
	}
	continueRestored(t, cfg, plan("b"), weights, moments, 5, full)
}

// TestStreamingOneFragmentIsDiLoCo: one fragment without overlap gives DiLoCo's losses.
func TestStreamingOneFragmentIsDiLoCo(t *testing.T) {
	cfg := streamingConfig(10, 1, 3, 0)
	cfg.Sync.Codec = jobspec.CodecInt8
	L := cfg.Train.Model.NumLayers()
	plan := twoReplicas("a", L, 2, 3)
	got, _ := runLocal(t, cfg, plan)
	cfg.Sync.Mode = jobspec.SyncDiLoCo
	want, _ := runLocal(t, cfg, plan)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("step %d: streaming with one fragment %v, DiLoCo %v", i+1, got[i], want[i])
		}
	}
	cfg.Sync.Mode, cfg.Sync.Fragments = jobspec.SyncStreaming, 2
	if two, _ := runLocal(t, cfg, plan); two[len(two)-1] == want[len(want)-1] {
		t.Fatal("two fragments give DiLoCo's losses too: the fragments change nothing")
	}
}

// TestStreamingOverQUIC: 2 replicas (2 stages each) over real QUIC data planes on loopback
// give the in-memory run's losses and end identical, the pseudo-gradients crossing the
// planes as reduce frames.
func TestStreamingOverQUIC(t *testing.T) {
	cfg := streamingConfig(10, 2, 4, 1)
	cfg.Sync.Codec = jobspec.CodecInt8
	L := cfg.Train.Model.NumLayers()
	planes := quicPlanes(t, 4)
	byName := map[string]Transport{}
	for _, p := range planes {
		byName[p.Self()] = p
	}
	plan := Plan{Replicas: [][]StagePlan{
		{{Node: planes[0].Self(), First: 0, Last: 2}, {Node: planes[1].Self(), First: 2, Last: L}},
		{{Node: planes[2].Self(), First: 0, Last: 1}, {Node: planes[3].Self(), First: 1, Last: L}},
	}}
	want, _ := runLocal(t, cfg, twoReplicas("m", L, 2, 1))
	run, err := NewLocalRun(cfg, plan, testData(), func(n string) Transport { return byName[n] })
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		got, err := run.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got != want[i] {
			t.Fatalf("step %d over QUIC: %v, in memory %v", i+1, got, want[i])
		}
	}
	assertReplicasEqual(t, run)
	var reduced int64
	for _, p := range planes {
		reduced += p.Stats().SentBytes(frame.KindReduce)
	}
	if reduced == 0 {
		t.Fatal("no pseudo-gradient crossed the data planes")
	}
}

// TestStreamingValidation: bad streaming settings are refused, each naming its field.
func TestStreamingValidation(t *testing.T) {
	for _, c := range []struct {
		edit func(*SyncConfig)
		want string
	}{
		{func(s *SyncConfig) { s.Fragments = 60 }, "fragments"},
		{func(s *SyncConfig) { s.Overlap = 50 }, "overlap"},
		{func(s *SyncConfig) { s.Overlap = -1 }, "overlap"},
		{func(s *SyncConfig) { s.MixLocal = 1 }, "mix-local"},
	} {
		sc := DefaultSyncConfig()
		sc.Mode = jobspec.SyncStreaming
		c.edit(&sc)
		if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want one naming %s", sc, err, c.want)
		}
	}
	cfg := streamingConfig(10, 5, 10, 1) // 5 fragments of a 4-layer model
	L := cfg.Train.Model.NumLayers()
	net := NewInMemory("a0", "a1")
	defer net.Close()
	_, err := NewLocalRun(cfg, EvenPlan(L, []string{"a0"}, []string{"a1"}), testData(), net.Peer)
	if err == nil || !strings.Contains(err.Error(), "fragments") {
		t.Fatalf("5 fragments of %d layers: error %v", L, err)
	}
}
