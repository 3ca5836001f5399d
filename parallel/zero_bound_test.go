package parallel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
)

// honestTrajectory is one AdamW run of n coordinates that TestParamLimitHoldsForHonestAdamW
// checks step by step.
type honestTrajectory struct {
	name  string
	theta float64 // the initial weights' scale
	decay bool
	lr    func(step int) float64
	grad  func(rng *rand.Rand, step int, g []float32)
	steps int
}

// wildGrad fills g with gradients whose scale jumps by up to 35 orders of magnitude from
// step to step, with whole zero steps, zero coordinates and a clipping coefficient.
func wildGrad(rng *rand.Rand, _ int, g []float32) {
	if rng.IntN(10) == 0 {
		clear(g)
		return
	}
	scale := math.Pow(10, -20+35*rng.Float64())
	clip := float32(1)
	if rng.IntN(3) == 0 {
		clip = float32(rng.Float64())
	}
	for j := range g {
		g[j] = float32(rng.NormFloat64()*scale) * clip
		if rng.IntN(8) == 0 {
			g[j] = 0
		}
	}
}

// worstGrad is the sequence that reaches AdamW's update bound at step `last`: |g_s| ∝
// (β2/β1)^s (Cauchy–Schwarz's equality case), one sign per coordinate.
func worstGrad(last int) func(*rand.Rand, int, []float32) {
	return func(_ *rand.Rand, step int, g []float32) {
		x := float32(math.Pow(0.95/0.9, float64(step-last)))
		for j := range g {
			g[j] = x
			if j%2 == 1 {
				g[j] = -x
			}
		}
	}
}

// warmCosine is a warm-up from lr/warmup and a cosine down to lr/10 over steps.
func warmCosine(lr float64, warmup, steps int) func(int) float64 {
	return func(s int) float64 {
		if s <= warmup {
			return lr * float64(s) / float64(warmup)
		}
		return lr * (0.1 + 0.45*(1+math.Cos(math.Pi*float64(s-warmup)/float64(steps-warmup))))
	}
}

// TestParamLimitHoldsForHonestAdamW: no honest AdamW step (kernels.AdamW.Step, float32, as
// a ZeRO owner runs it) is refused by the parameter all-gather's bound, over trajectories
// of many steps with gradients of wildly varying scale, zero gradients and clipping,
// weights from 0 to 100, decayed and not, learning rates from 1e-9 to 0.1, and the worst
// gradient sequence, which reaches the bound exactly. Logged: the largest ratio of a move
// to lr·(B + wd·|θ|) where rounding to θ's float32 grid is negligible beside the step, and
// the largest share of the rounding slack (paramStepSlack, paramStepULPs) any move used.
func TestParamLimitHoldsForHonestAdamW(t *testing.T) {
	var cases []honestTrajectory
	for _, theta := range []float64{0, 0.02, 1, 100} {
		for _, decay := range []bool{false, true} {
			cases = append(cases,
				honestTrajectory{"wild, warm-up and cosine", theta, decay, warmCosine(2e-3, 30, 2000), wildGrad, 2000},
				honestTrajectory{"wild, lr 1e-9", theta, decay, func(int) float64 { return 1e-9 }, wildGrad, 300},
				honestTrajectory{"wild, lr 0.1", theta, decay, func(int) float64 { return 0.1 }, wildGrad, 300})
			for _, last := range []int{1, 2, 10, 100, 400} {
				cases = append(cases, honestTrajectory{"worst sequence", theta, decay, func(int) float64 { return 2e-3 }, worstGrad(last), last})
			}
		}
	}
	const n = 64
	h := DefaultTrainConfig().adamW()
	var worstBare, slackUsed float64
	for ci, c := range cases {
		rng := rand.New(rand.NewPCG(uint64(ci), 7))
		p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for j := range p {
			p[j] = float32(rng.NormFloat64() * c.theta)
		}
		var sup supBound
		for step := 1; step <= c.steps; step++ {
			c.grad(rng, step, g)
			h.LR = c.lr(step)
			old := slices.Clone(p)
			h.Step(p, g, m, v, step, c.decay)
			lim := paramLimit{lr: h.LR, wd: h.WeightDecay, b: sup.upTo(h, step)}
			if r := lim.reason(p, old); r != "" {
				t.Fatalf("%s, θ ~ %g, decay %v, step %d: an honest step refused: %s", c.name, c.theta, c.decay, step, r)
			}
			for j := range p {
				o, f := float64(old[j]), float64(p[j])
				d, bare := math.Abs(f-o), lim.lr*(lim.b+lim.wd*math.Abs(o))
				slackUsed = max(slackUsed, (d-bare)/(lim.max(o, f)-bare))
				if bare > 1e6*ulp32(max(math.Abs(o), math.Abs(f))) {
					worstBare = max(worstBare, d/bare)
				}
			}
		}
	}
	t.Logf("largest honest move / lr·(B + wd·|θ|) where θ's rounding is negligible: %.7f; largest share of the rounding slack used: %.3f", worstBare, slackUsed)
	if slackUsed > 0.5 {
		t.Errorf("an honest step used %.0f%% of the rounding slack", 100*slackUsed)
	}
	if worstBare < 0.999 {
		t.Errorf("the worst sequence moved only %.4f of the bound: not tight, or not run", worstBare)
	}
}

// TestParamLimitRefusesShrunkChunks: a chunk of realistic weights (std 0.02, lr 2e-3 at a
// late step) that its owner updated honestly and then scaled ×0.75 or ×0.9 is refused (the
// former 16·lr·(1+|θ|) bound took both: it refused only chunks holding a weight over
// 0.14), while the honest chunk is taken; so are a chunk of all-zero biases scaled (there
// is nothing to shrink), and not a value that is not finite or near float32's largest.
func TestParamLimitRefusesShrunkChunks(t *testing.T) {
	const n, step = 4096, 200
	h := DefaultTrainConfig().adamW()
	h.LR = 2e-3
	rng := rand.New(rand.NewPCG(1, 2))
	p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for j := range p {
		p[j] = float32(rng.NormFloat64() * 0.02)
	}
	var old []float32
	for s := 1; s <= step; s++ { // moments of a real trajectory
		for j := range g {
			g[j] = float32(rng.NormFloat64() * 1e-3)
		}
		old = slices.Clone(p)
		h.Step(p, g, m, v, s, true)
	}
	var sup supBound
	lim := paramLimit{lr: h.LR, wd: h.WeightDecay, b: sup.upTo(h, step)}
	if r := lim.reason(p, old); r != "" {
		t.Fatalf("the honest chunk refused: %s", r)
	}
	for _, by := range []float32{0.75, 0.9, 0.97} {
		bad := slices.Clone(p)
		kernels.Scale(bad, by)
		r := lim.reason(bad, old)
		t.Logf("×%g: %q", by, r)
		if r == "" {
			t.Errorf("a chunk of weights of std 0.02 scaled ×%g was taken", by)
		}
	}
	zero := make([]float32, 256)
	if r := lim.reason(zero, make([]float32, 256)); r != "" {
		t.Errorf("zero biases refused: %s", r)
	}
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(-1)), math.MaxFloat32, -math.MaxFloat32} {
		bad := slices.Clone(p)
		bad[7] = x
		if r := lim.reason(bad, old); r == "" {
			t.Errorf("a chunk holding %g was taken", x)
		}
	}
}

// TestSupBound: supBound is sup_{τ≤t} of the update bound, also after t goes back (a
// restore).
func TestSupBound(t *testing.T) {
	h := DefaultTrainConfig().adamW()
	var b supBound
	if got := b.upTo(h, 1); got != 1 {
		t.Errorf("t = 1: %v, want 1", got)
	}
	want := 0.0
	for τ := 1; τ <= 500; τ++ {
		want = max(want, h.UpdateBound(τ))
	}
	if got := b.upTo(h, 500); got != want {
		t.Errorf("t = 500: %v, want %v", got, want)
	}
	if got := b.upTo(h, 3); got != max(h.UpdateBound(1), h.UpdateBound(2), h.UpdateBound(3)) {
		t.Errorf("back at t = 3: %v", got)
	}
}

// BenchmarkZeroParamRefusal is what ZeRO-1's refusal of shrunk parameter chunks costs
// when it fires: four replicas (one stage, or two), all honest or the last two sending
// everything ×0.75, whose chunks the honest members refuse at every step and update
// themselves (adopt: AdamW on the gathered aggregate, so every later collective is the
// checked gather). Wall time per step of the whole local run (every replica in this
// process, attackers included) and replica 0's sync bytes per step.
func BenchmarkZeroParamRefusal(b *testing.B) {
	for _, stages := range []int{1, 2} {
		for _, by := range []float32{1, 0.75} {
			b.Run(fmt.Sprintf("stages=%d/x%g", stages, by), func(b *testing.B) { benchZeroRefusal(b, stages, by) })
		}
	}
}

func benchZeroRefusal(b *testing.B, stages int, by float32) {
	const n = 4
	cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	cfg.Train.Steps, cfg.Train.Batch, cfg.Train.MicroBatches = b.N+1, 2*n, 1
	cfg.Sync.Mode, cfg.Sync.Zero = jobspec.SyncEveryStep, 1
	L := cfg.Train.Model.NumLayers()
	plan, names := twoStagePlan(L, n)
	if stages == 1 {
		plan, names = Plan{}, nil
		for i := range n {
			names = append(names, fmt.Sprintf("r%d", i))
			plan.Replicas = append(plan.Replicas, []StagePlan{{Node: names[i], First: 0, Last: L}})
		}
	}
	net := NewInMemory(names...)
	defer net.Close()
	run, err := NewLocalRun(cfg, plan, testData(), func(node string) Transport {
		if rep, _, _ := strings.Cut(node, "."); by != 1 && (rep == "r2" || rep == "r3") {
			return scaler{Transport: net.Peer(node), s: by}
		}
		return net.Peer(node)
	})
	if err != nil {
		b.Fatal(err)
	}
	benchSyncSteps(b, run) // step 0 first: the first mirror, the first refusal
	rej, _ := run.ReportedBy(0)
	b.ReportMetric(float64(len(rej)), "rejections")
}

// BenchmarkParamLimit is the check of one chunk of 1 << 16 honest parameters.
func BenchmarkParamLimit(b *testing.B) {
	const n = 1 << 16
	h := DefaultTrainConfig().adamW()
	h.LR = 2e-3
	rng := rand.New(rand.NewPCG(3, 4))
	p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for j := range p {
		p[j], g[j] = float32(rng.NormFloat64()*0.02), float32(rng.NormFloat64())
	}
	old := slices.Clone(p)
	h.Step(p, g, m, v, 1, true)
	lim := paramLimit{lr: h.LR, wd: h.WeightDecay, b: h.UpdateBound(1)}
	b.SetBytes(4 * n)
	for range b.N {
		if r := lim.reason(p, old); r != "" {
			b.Fatal(r)
		}
	}
}
