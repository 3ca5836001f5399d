package parallel

import (
	"context"
	"math"
	"strings"
	"testing"

)

// streamingConfig is a streaming job of steps steps: F fragments, H inner steps, overlap τ.
func streamingConfig(steps, F, H, tau int) JobConfig {
	cfg := pipelineConfig(steps)
	cfg.Sync = DefaultSyncConfig()
	cfg.Sync.Mode, cfg.Sync.Fragments, cfg.Sync.InnerSteps, cfg.Sync.Overlap = SyncStreaming, F, H, tau
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
