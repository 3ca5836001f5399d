package parallel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/model"
)

// TestScoreRejections: when the upper-median contribution clearly lowers the held-out
// loss (by more than ScoreNoise standard errors), a contribution is dropped when its gain
// lies under ScoreFloor of that one's by more than ScoreNoise standard errors; when it
// does not (no direction the batch agrees on: near convergence), only a contribution
// whose loss is not a number is; all dropped are named unless none cleared the floor.
func TestScoreRejections(t *testing.T) {
	a, b, c := []float32{1}, []float32{2}, []float32{3}
	nan := math.NaN()
	for _, tc := range []struct {
		all    [][]float32
		scores []float64
		want   string
		se     float64 // every score's standard error
	}{
		{[][]float32{a, b, c}, []float64{0.1, 0.2, 0.3}, "map[]", 0},
		{[][]float32{a, b, c}, []float64{0.1, -0.2, 0.3}, "map[1:true]", 0},
		{[][]float32{a, nil, c}, []float64{0.1, nan, -1}, "map[2:true]", 0},
		{[][]float32{a, b, c}, []float64{0.1, 0.2, nan}, "map[2:true]", 0},
		{[][]float32{a, b, c}, []float64{0.01, 0.2, 0.3}, "map[0:true]", 0}, // under a quarter of the median's
		{[][]float32{a, b, c}, []float64{0.06, 0.2, 0.3}, "map[]", 0},
		{[][]float32{a, b, c, c}, []float64{-1, -0.5, 0.2, 0.3}, "map[0:true 1:true]", 0},
		// No clear direction (the upper median does not lower the loss): only a
		// contribution whose loss is not a number is dropped.
		{[][]float32{a, b, c}, []float64{0.1, -0.2, 0}, "map[]", 0},
		{[][]float32{a, b, c}, []float64{-0.1, 0, -0.3}, "map[]", 0},
		{[][]float32{a, b, c}, []float64{-0.03, 0.02, 0.03}, "map[]", 0.01},
		{[][]float32{a, b, c}, []float64{nan, nan, nan}, "map[0:false 1:false 2:false]", 0},
		// Within ScoreNoise standard errors of the floor: kept.
		{[][]float32{a, b, c}, []float64{0, 0.1, 0.2}, "map[]", 0.01},
		{[][]float32{a, b, c}, []float64{-0.05, 0.1, 0.2}, "map[0:true]", 0.01},
	} {
		scores := make([]heldOutScore, len(tc.scores))
		for m, g := range tc.scores {
			scores[m] = heldOutScore{gain: g, se: tc.se}
		}
		got := map[int]bool{}
		for m, reason := range scoreRejections(tc.all, scores) {
			got[m] = reason != ""
		}
		if fmt.Sprint(got) != tc.want {
			t.Errorf("scores %v: dropped (named) %v, want %v", tc.scores, got, tc.want)
		}
	}
}

// TestHeldOutScoreSeesDirection: from the model's initial weights, a step along the
// held-out batch's own descent direction (the negated gradient, sent as the contribution
// "gradient") lowers the held-out loss and scores > 0, its reverse scores < 0, and two
// scorers built apart (two members) give the same scores to the bit.
func TestHeldOutScoreSeesDirection(t *testing.T) {
	cfg := testConfig()
	data := testData()
	runs := []syncRun{{first: 0, last: cfg.Model.NumLayers()}}
	s1, err1 := newHeldOutScorer(cfg, data, runs)
	s2, err2 := newHeldOutScorer(cfg, data, runs)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	base := [][]float32{flattenValues(s1.runParams[0])}
	grad := heldOutGradient(t, cfg, s1, 7)
	rev := make([]float32, len(grad))
	noise := make([]float32, len(grad))
	rng := rand.New(rand.NewPCG(1, 2))
	for i, v := range grad {
		rev[i], noise[i] = -v, float32(rng.NormFloat64())*1e-3
	}
	all := [][]float32{grad, rev, nil, noise}
	step := func(c []float32) []float64 { return []float64{0.05 / norm2(c)} }
	a, err := s1.scores(7, 0, base, nil, all, step)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s2.scores(7, 0, base, nil, all, step)
	if err != nil {
		t.Fatal(err)
	}
	if !(a[0].gain > 0) || !(a[1].gain < 0) || !math.IsNaN(a[2].gain) || !(a[0].se > 0) {
		t.Fatalf("scores %v: want the gradient > 0, its reverse < 0, the dropped NaN, a standard error", a)
	}
	if !(a[0].upper() > 0) || !(a[1].upper() < 0) {
		t.Fatalf("scores %v: the gradient's and its reverse's gains are within noise of 0", a)
	}
	for m := range a {
		if math.Float64bits(a[m].gain) != math.Float64bits(b[m].gain) || math.Float64bits(a[m].se) != math.Float64bits(b[m].se) {
			t.Fatalf("two scorers differ at %d: %v and %v", m, a, b)
		}
	}
	if _, err := s1.scores(7, 0, [][]float32{base[0][1:]}, nil, all, step); err == nil {
		t.Fatal("weights of the wrong size were scored")
	}
}

// heldOutGradient is the gradient of the held-out loss of step at the scorer's weights.
func heldOutGradient(t *testing.T, cfg TrainConfig, s *heldOutScorer, step int) []float32 {
	t.Helper()
	mb, err := s.sampler.MicroBatch(step, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var ws model.Workspace
	model.ZeroGrads(s.layers)
	x := []float32(nil)
	saved := make([]model.Saved, len(s.layers))
	for i, l := range s.layers {
		x, saved[i] = l.Forward(&ws, mb, x)
	}
	dy := []float32{1}
	for i := len(s.layers) - 1; i >= 0; i-- {
		dy = s.layers[i].Backward(&ws, mb, saved[i], dy)
	}
	return flattenGrads(model.LayerParams(s.layers))
}

// BenchmarkHeldOutScore times the held-out scoring of R = 4 contributions of the default
// model (4 layers, d_model 128, context 128): one probe each, as every-step sync and ZeRO
// score (R + 1 forward passes of ScoreWindows windows), and two, as DiLoCo does (2R + 1).
// Read it against a training step of the same model (batch 16), in the same run:
//
//	go test ./parallel -run '^$' -bench 'HeldOutScore|TrainStep/default' -count 3
func BenchmarkHeldOutScore(b *testing.B) {
	cfg := DefaultTrainConfig()
	rng := rand.New(rand.NewPCG(1, 2))
	text := make([]byte, 1<<19)
	for i := range text {
		text[i] = byte(32 + rng.IntN(95))
	}
	data := &model.Dataset{Source: "bench", Train: model.ByteTokens(text), Val: model.ByteTokens(text), Vocab: 256}
	runs := []syncRun{{first: 0, last: cfg.Model.NumLayers()}}
	s, err := newHeldOutScorer(cfg, data, runs)
	if err != nil {
		b.Fatal(err)
	}
	base := [][]float32{flattenValues(s.runParams[0])}
	all := make([][]float32, 4)
	for m := range all {
		all[m] = make([]float32, len(base[0]))
		for i := range all[m] {
			all[m][i] = float32(rng.NormFloat64()) * 1e-4
		}
	}
	for _, probes := range []int{1, 2} {
		b.Run(fmt.Sprintf("R=4/probes=%d", probes), func(b *testing.B) {
			for i := range b.N {
				if _, err := s.scores(i, 0, base, nil, all, func(c []float32) []float64 { return []float64{1, 0.5}[:probes] }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLongestEfficient: the outer step's length is the longest candidate that keeps half
// the shortest's loss reduction per unit of length: the honest length over a shrunk one,
// not a too-long one that still lowers the loss, and the shortest when it does not lower
// the loss at all.
func TestLongestEfficient(t *testing.T) {
	for _, c := range []struct {
		name    string
		lengths []float64
		losses  []float64
		want    int
	}{
		// ×0.05: 0.05 lowers 3.0 by 0.01 (0.2 per unit), 1 by 0.19 (0.19 per unit).
		{"shrunk pair", []float64{0.05, 1}, []float64{2.99, 2.81}, 1},
		// ×15: 1 lowers by 0.2 (0.2 per unit), 15 by 0.5 (0.033 per unit): more loss
		// removed, but far past the linear range.
		{"long pair", []float64{1, 15}, []float64{2.8, 2.5}, 0},
		{"all three", []float64{0.05, 1, 15}, []float64{2.99, 2.81, 2.5}, 1},
		{"nothing lowers", []float64{1, 2}, []float64{3.1, 2.9}, 0},
	} {
		if got := longestEfficient(c.lengths, 3.0, c.losses); got != c.want {
			t.Errorf("%s: chose %d, want %d", c.name, got, c.want)
		}
	}
	if !spreadWithin([]float64{1, 0.99 * LengthSpread}, LengthSpread) || spreadWithin([]float64{1, 1.01 * LengthSpread}, LengthSpread) || spreadWithin([]float64{0, 1}, LengthSpread) {
		t.Error("spreadWithin")
	}
}

// TestContested: the norm check is contested when the lower and the upper median drop
// different contributions: two against two 16× apart, not one outsized of four, not
// honest norms, not fewer than four.
func TestContested(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		norms []float64
		want  bool
	}{
		{[]float64{1, 1.2, 0.9, 1.1}, false},
		{[]float64{1, 1.2, 0.9, 1000}, false},
		{[]float64{0.05, 0.06, 1, 1.2}, true},
		{[]float64{1, 1.2, 1000, 1100}, true},
		{[]float64{0.05, 0.06, 1.2, nan}, false},
		{[]float64{0.05, 1, 1.2}, false},
	} {
		if got := contested(c.norms); got != c.want {
			t.Errorf("contested(%v) = %v, want %v", c.norms, got, c.want)
		}
	}
}

// TestSuspectCollectives: under score: auto a gradient collective is scored when its
// admissible norms spread over GradientSpread (not when the outsized one is over the norm
// bound anyway) or its contributions pull apart (a reversed pair against an honest one,
// not gradients that agree or are orthogonal); ZeRO also when the sum is longer than the
// claimed norms allow.
func TestSuspectCollectives(t *testing.T) {
	for _, c := range []struct {
		norms []float64
		want  bool
	}{
		{[]float64{1, 1.2, 0.9, 1.1}, false},
		{[]float64{1, 1.2, 15, 15}, true},
		{[]float64{1, 1.2, 0.9, 1e38}, false},
		{[]float64{1, 1.2, 7}, false},
	} {
		if got := sizesDisagree(c.norms); got != c.want {
			t.Errorf("sizesDisagree(%v) = %v, want %v", c.norms, got, c.want)
		}
	}
	a, b := []float32{1, 0.2}, []float32{0.9, 0.1}
	neg := func(x []float32) []float32 { return scaled(x, -1) }
	for _, c := range []struct {
		name string
		all  [][]float32
		want bool
	}{
		{"agree", [][]float32{a, b, a, b}, false},
		{"orthogonal", [][]float32{{1, 0}, {0, 1}, {0, 0.5}}, false},
		{"reversed pair", [][]float32{a, b, neg(a), neg(b)}, true},
		{"one reversed of three", [][]float32{a, b, neg(a)}, true},
		{"two left", [][]float32{a, neg(a), nil}, false},
	} {
		if got := pullApart(c.all); got != c.want {
			t.Errorf("pullApart %s = %v, want %v", c.name, got, c.want)
		}
	}
	honest := []float64{1, 1, 1}
	for _, c := range []struct {
		name       string
		sumSquares float64
		want       bool
	}{
		{"agree", 6, false},
		{"pull apart", 2.5, true},
		{"longer than the norms allow", 9.5, true},
	} {
		if got := suspect(honest, c.sumSquares); got != c.want {
			t.Errorf("suspect %s = %v, want %v", c.name, got, c.want)
		}
	}
}
