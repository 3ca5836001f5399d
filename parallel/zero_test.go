package parallel

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// zeroPlan is R replicas of two stages each, node names prefix0…
func zeroPlan(prefix string, L, R int) Plan {
	names := nodeNames(prefix, 2*R)
	var reps [][]string
	for r := 0; r < R; r++ {
		reps = append(reps, names[2*r:2*r+2])
	}
	return EvenPlan(L, reps...)
}

// zeroBound is the relative loss difference allowed between ZeRO and unsharded sync: the
// chunks are reduced in the same ring order, so only the global norm's float64 sum is
// added in another order; its effect on a float32 clip coefficient is below float32
// rounding of a loss (2⁻²³ ≈ 1.2e-7).
const zeroBound = 1.2e-7

// TestZeroMatchesUnshardedSync: ZeRO-1 and ZeRO-2 on 2 and 3 replicas (3 gives chunks of
// uneven sizes), clipping every step (so the norm summed from the shards matters), train
// with unsharded sync's losses within zeroBound over 10 steps, and each
// worker holds at most ceil(n/R) moment elements of each kind per run.
func TestZeroMatchesUnshardedSync(t *testing.T) {
	cfg := pipelineConfig(10)
	cfg.Train.Batch = 12
	cfg.Train.ClipNorm = 0.05 // below the gradients' norm: every step clips by the global norm
	L := cfg.Train.Model.NumLayers()
	for _, R := range []int{2, 3} {
		want, base := runLocal(t, cfg, zeroPlan("u", L, R))
		for _, zero := range []int{1, 2} {
			c := cfg
			c.Sync.Zero = zero
			got, run := runLocal(t, c, zeroPlan("z", L, R))
			worst := 0.0
			for i := range want {
				worst = max(worst, math.Abs(got[i]-want[i])/want[i])
			}
			t.Logf("ZeRO-%d, %d replicas: worst relative loss difference %.3g over %d steps", zero, R, worst, len(want))
			if worst > zeroBound {
				t.Fatalf("ZeRO-%d, %d replicas: losses %v, unsharded %v", zero, R, got, want)
			}
			checkMomentShards(t, run, base, R)
		}
	}
}

// checkMomentShards asserts that every ZeRO worker holds at most 2·(ceil(n/R)+runs)
// moment elements where the unsharded worker holds 2·n.
func checkMomentShards(t *testing.T, run, base *LocalRun, R int) {
	t.Helper()
	for i, w := range run.Workers() {
		n := countParams(w.params)
		if full := base.Workers()[i].MomentElements(); full != 2*n {
			t.Fatalf("unsharded worker %d holds %d moment elements, want %d", i, full, 2*n)
		}
		limit := 2 * ((n+R-1)/R + len(w.runs))
		if got := w.MomentElements(); got > limit || got == 0 {
			t.Fatalf("ZeRO worker %d holds %d moment elements for %d parameters on %d replicas, limit %d", i, got, n, R, limit)
		}
		t.Logf("worker %d: %d moment bytes unsharded, %d under ZeRO", i, 4*2*n, 4*w.MomentElements())
	}
}

// TestZeroRestoreContinuesExactly: snapshots of a ZeRO-2 run on 2 replicas (each replica's
// pieces of the moments) restore into the same sharding, into ZeRO-1 under replicas cut differently and into
// unsharded sync, and each continues with the uninterrupted run's losses bit for bit; with
// one replica's pieces missing the restore fails and names the moment.
func TestZeroRestoreContinuesExactly(t *testing.T) {
	cfg := pipelineConfig(8)
	cfg.Sync.Zero = 2
	L := cfg.Train.Model.NumLayers()
	full, _ := runLocal(t, cfg, zeroPlan("u", L, 2))
	net := NewInMemory(planNodes(zeroPlan("a", L, 2))...)
	first, err := NewLocalRun(cfg, zeroPlan("a", L, 2), testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	for first.StepsDone() < 4 {
		if _, err := first.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	weights, perReplica := snapshots(first)
	net.Close()
	merged := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}, Metadata: perReplica[0].Metadata}
	for _, m := range perReplica {
		for k, v := range m.Tensors {
			merged.Tensors[k] = v
		}
	}
	all := map[int]*model.TensorFile{0: merged, 1: merged, 2: merged}
	continueRestored(t, cfg, zeroPlan("b", L, 2), weights, all, 4, full)
	recut := cfg
	recut.Sync.Zero = 1
	continueRestored(t, recut, twoReplicas("c", L, 1, 3), weights, all, 4, full)
	plain := cfg
	plain.Sync.Zero = 0
	continueRestored(t, plain, zeroPlan("d", L, 2), weights, all, 4, full)

	enet := NewInMemory(planNodes(zeroPlan("e", L, 2))...)
	defer enet.Close()
	other, err := NewLocalRun(cfg, zeroPlan("e", L, 2), testData(), enet.Peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Workers()[0].Restore(weights, perReplica[0], 4); err == nil || !strings.Contains(err.Error(), "exp_avg") {
		t.Fatalf("restore from one replica's pieces: %v, want an error naming the missing moment", err)
	}
}

// TestZeroConfigErrors: zero outside 0…2, with DiLoCo or with a codec is an error naming it.
func TestZeroConfigErrors(t *testing.T) {
	for _, sc := range []SyncConfig{
		{Mode: jobspec.SyncEveryStep, Codec: jobspec.CodecNone, Zero: 3},
		{Mode: jobspec.SyncDiLoCo, Codec: jobspec.CodecNone, InnerSteps: 2, OuterLR: 0.7, Zero: 1},
		{Mode: jobspec.SyncEveryStep, Codec: jobspec.CodecInt8, Zero: 2},
	} {
		if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), "zero") {
			t.Fatalf("%+v: error %v, want one naming zero", sc, err)
		}
	}
}

// TestZeroOverQUIC: ZeRO-2 over real QUIC data planes, 2 replicas × 2 stages, trains with
// the losses of unsharded sync over the in-memory transport.
func TestZeroOverQUIC(t *testing.T) {
	cfg := pipelineConfig(10)
	L := cfg.Train.Model.NumLayers()
	want, _ := runLocal(t, cfg, zeroPlan("u", L, 2))
	planes := quicPlanes(t, 4)
	byName := map[string]Transport{}
	var names []string
	for _, p := range planes {
		names = append(names, p.Self())
		byName[p.Self()] = p
	}
	cfg.Sync.Zero = 2
	run, err := NewLocalRun(cfg, EvenPlan(L, names[:2], names[2:]), testData(), func(n string) Transport { return byName[n] })
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		got, err := run.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-want[i])/want[i] > zeroBound {
			t.Fatalf("step %d over QUIC under ZeRO-2: loss %v, unsharded %v", i+1, got, want[i])
		}
	}
}
