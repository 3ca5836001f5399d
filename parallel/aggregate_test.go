package parallel

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

func TestCombineRules(t *testing.T) {
	a, b, c := []float32{1, -4, 10}, []float32{2, 0, 11}, []float32{100, 5, 12}
	x := make([]float32, 3)
	combine(x, [][]float32{a, b, c}, jobspec.AggregateMedian)
	if want := []float32{2, 0, 11}; fmt.Sprint(x) != fmt.Sprint(want) {
		t.Errorf("median %v, want %v", x, want)
	}
	combine(x, [][]float32{a, b}, jobspec.AggregateMedian)
	if want := []float32{1.5, -2, 10.5}; fmt.Sprint(x) != fmt.Sprint(want) {
		t.Errorf("median of two %v, want %v", x, want)
	}
	d, e := []float32{3, 1, 13}, []float32{-50, 2, 9}
	combine(x, [][]float32{a, b, c, d, e}, jobspec.AggregateTrimmed) // drops one at each end
	if want := []float32{2, 1, 11}; fmt.Sprint(x) != fmt.Sprint(want) {
		t.Errorf("trimmed mean %v, want %v", x, want)
	}
	// The mean has the bits of the plain sum in member order scaled by 1/n: with honest
	// replicas it is what the all-reduce always computed.
	combine(x, [][]float32{a, b, c}, jobspec.AggregateMean)
	inv := 1 / float32(3)
	for i := range x {
		if want := (a[i] + b[i] + c[i]) * inv; math.Float32bits(x[i]) != math.Float32bits(want) {
			t.Errorf("mean[%d] = %v, want %v", i, x[i], want)
		}
	}
	for n, want := range map[int]int{1: 0, 2: 0, 3: 1, 4: 1, 7: 1, 8: 2, 16: 4} {
		if got := trimmedCount(n); got != want {
			t.Errorf("trimmedCount(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestAdmissibleAndReference(t *testing.T) {
	ref := refNorm([]float64{5, 7, math.NaN(), 1e40, math.Inf(1)}) // finite: 5, 7, 1e40
	if ref != 7 {
		t.Fatalf("refNorm = %v, want the lower median of the finite norms, 7", ref)
	}
	if r := refNorm([]float64{5, 1e38}); r != 5 {
		t.Errorf("refNorm of two = %v, want the smaller: one outsized member cannot raise its own bound", r)
	}
	for _, tc := range []struct {
		v    []float32
		want bool
	}{
		{[]float32{4, 3}, true},
		{[]float32{100, 0}, true},
		{[]float32{113, 0}, false},
		{[]float32{float32(math.NaN()), 0}, false},
		{[]float32{float32(math.Inf(-1)), 0}, false},
		{[]float32{1e38, 1e38}, false}, // its square overflows float32, not float64
	} {
		if got := admissible(norm2(tc.v), ref) == ""; got != tc.want {
			t.Errorf("admissible(%v) = %v, want %v", tc.v, got, tc.want)
		}
	}
	if admissible(1e30, 0) != "" {
		t.Error("without a reference only finiteness can be checked")
	}
}

// attackCollective runs allReduceMean on R in-memory replicas whose contributions are
// honest vectors near 1 except member bad's, which is poison, and returns each honest
// member's result and what each dropped.
func attackCollective(t *testing.T, R, bad int, poison []float32, codec jobspec.Codec, rule jobspec.Aggregate) ([][]float32, [][]Rejection, [][]float32) {
	t.Helper()
	const n = 64
	rng := rand.New(rand.NewPCG(7, uint64(R)))
	names := make([]string, R)
	for i := range names {
		names[i] = fmt.Sprintf("r%d", i)
	}
	net := NewInMemory(names...)
	defer net.Close()
	inputs, outs, drops := make([][]float32, R), make([][]float32, R), make([][]Rejection, R)
	var wg sync.WaitGroup
	errs := make([]error, R)
	for m := range R {
		x := make([]float32, n)
		for i := range x {
			x[i] = 1 + 0.1*float32(rng.NormFloat64())
		}
		if m == bad {
			copy(x, poison)
		}
		inputs[m] = append([]float32(nil), x...)
		var ef *ErrorFeedback
		if codec != jobspec.CodecNone {
			c, err := NewCodec(codec, 0.25)
			if err != nil {
				t.Fatal(err)
			}
			ef = NewErrorFeedback(c, n)
		}
		pol := policy{rule: rule, reject: func(r Rejection) { drops[m] = append(drops[m], r) }}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[m] = allReduceMean(context.Background(), net.Peer(names[m]), Group{Members: names, Self: m}, roundKey{job: 1}, x, ef, pol)
			outs[m] = x
		}()
	}
	wg.Wait()
	for m, err := range errs {
		if err != nil {
			t.Fatalf("member %d: %v", m, err)
		}
	}
	return outs, drops, inputs
}

// honestMean is the mean of the inputs of every member but bad.
func honestMean(inputs [][]float32, bad int) []float32 {
	out := make([]float32, len(inputs[0]))
	for m, v := range inputs {
		if m == bad {
			continue
		}
		for i := range out {
			out[i] += v[i] / float32(len(inputs)-1)
		}
	}
	return out
}

// maxAbsDiff is max |a−b|, +Inf for a non-finite a.
func maxAbsDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		if math.IsNaN(float64(a[i])) || math.IsInf(float64(a[i]), 0) {
			return math.Inf(1)
		}
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}

// TestOneBadReplicaCannotPoisonTheOthers: for every codec and rule, a replica of three
// that sends NaN or 1e38 is dropped by both honest ones, which end with the same bits,
// within the codec's error of the honest-only mean, and report the bad replica by name.
func TestOneBadReplicaCannotPoisonTheOthers(t *testing.T) {
	const R, bad = 3, 1
	nan, huge := make([]float32, 64), make([]float32, 64)
	for i := range nan {
		nan[i], huge[i] = float32(math.NaN()), 1e38
	}
	nan[5] = 1 // a single NaN among finite values is enough to poison a plain mean
	tolerance := map[jobspec.Codec]float64{jobspec.CodecNone: 1e-6, jobspec.CodecFP16: 2e-3, jobspec.CodecInt8: 0.02, jobspec.CodecTopK: 1.2}
	for _, codec := range jobspec.Codecs() {
		for _, rule := range jobspec.Aggregates() {
			for name, poison := range map[string][]float32{"NaN": nan, "1e38": huge} {
				outs, drops, inputs := attackCollective(t, R, bad, poison, codec, rule)
				want := honestMean(inputs, bad)
				for m, x := range outs {
					if m == bad {
						continue
					}
					if d := maxAbsDiff(x, want); d > tolerance[codec] {
						t.Errorf("%s %s %s: member %d is %g from the honest mean (bound %g)", codec, rule, name, m, d, tolerance[codec])
					}
					if len(drops[m]) != 1 || drops[m][0].Member != "r1" {
						t.Errorf("%s %s %s: member %d dropped %+v, want r1 once", codec, rule, name, m, drops[m])
					}
				}
				if fmt.Sprint(outs[0]) != fmt.Sprint(outs[2]) {
					t.Errorf("%s %s %s: the honest members disagree", codec, rule, name)
				}
			}
		}
	}
}

// TestAnOutlierInsideTheNormBoundIsDropped: a replica of five whose contribution is
// within the norm bound but far from the others (×10, sign flipped) is dropped by every
// rule, the mean included (outliers, MaxDistanceRatio), named, and leaves every rule's
// result within the honest replicas' spread of their mean.
func TestAnOutlierInsideTheNormBoundIsDropped(t *testing.T) {
	const R, bad = 5, 3
	outlier := make([]float32, 64)
	for i := range outlier {
		outlier[i] = -10
	}
	for _, rule := range jobspec.Aggregates() {
		outs, drops, inputs := attackCollective(t, R, bad, outlier, jobspec.CodecNone, rule)
		want := honestMean(inputs, bad)
		d := maxAbsDiff(outs[0], want)
		if len(drops[0]) != 1 || drops[0][0].Member != "r3" {
			t.Errorf("%s: dropped %+v, want r3 once", rule, drops[0])
		}
		if d > 0.35 {
			t.Errorf("%s: %g from the honest mean, more than the honest spread", rule, d)
		}
		t.Logf("%s: max distance from the honest mean %.3g", rule, d)
	}
}

// TestHonestReplicasKeepThePlainMean: with every replica honest, the mean rule gives the
// bits it gave before contributions were checked, through the ring and through a codec.
func TestHonestReplicasKeepThePlainMean(t *testing.T) {
	for _, codec := range []jobspec.Codec{jobspec.CodecNone, jobspec.CodecInt8} {
		outs, drops, inputs := attackCollective(t, 4, -1, nil, codec, "")
		for m := range outs {
			if len(drops[m]) != 0 || fmt.Sprint(outs[m]) != fmt.Sprint(outs[0]) {
				t.Fatalf("%s: member %d dropped %v or disagrees", codec, m, drops[m])
			}
		}
		if codec == jobspec.CodecNone && maxAbsDiff(outs[0], honestMean(append(inputs, make([]float32, 64)), 4)) > 1e-6 {
			t.Errorf("ring mean is not the mean")
		}
	}
}

func BenchmarkAggregate(b *testing.B) {
	const R, n = 5, 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	contribs := make([][]float32, R)
	for m := range contribs {
		contribs[m] = make([]float32, n)
		for i := range contribs[m] {
			contribs[m][i] = float32(rng.NormFloat64())
		}
	}
	x := make([]float32, n)
	for _, rule := range jobspec.Aggregates() {
		b.Run(string(rule), func(b *testing.B) {
			b.SetBytes(int64(R * n * 4))
			for b.Loop() {
				combine(x, contribs, rule)
			}
		})
	}
}

// TestNonFiniteGradientSkipsTheStep: a step whose gradient norm is not finite leaves every
// parameter and the optimizer's state as they were (before, a NaN norm silently disabled
// clipping and AdamW spread the NaN through every parameter it touched).
func TestNonFiniteGradientSkipsTheStep(t *testing.T) {
	tr, err := NewTrainer(testConfig(), testData())
	if err != nil {
		t.Fatal(err)
	}
	step(t, tr)
	params := tr.Model().Params()
	last := params[len(params)-1]
	last.Value.Data[0] = float32(math.NaN()) // poisons the loss, hence every gradient
	before := map[string][]float32{}
	for _, p := range params {
		before[p.Name] = append([]float32(nil), p.Value.Data...)
	}
	steps := tr.w.state.OptimizerSteps()
	step(t, tr)
	if tr.w.state.OptimizerSteps() != steps {
		t.Errorf("optimizer steps %d → %d: the update was applied", steps, tr.w.state.OptimizerSteps())
	}
	for _, p := range params {
		if fmt.Sprint(p.Value.Data) != fmt.Sprint(before[p.Name]) {
			t.Fatalf("%s changed in a skipped step", p.Name)
		}
	}
	if tr.StepsDone() != 2 {
		t.Errorf("steps done %d, want 2: a skipped step still counts", tr.StepsDone())
	}
}

// TestEqualiseSizes: a gradient collective whose per-sequence norms spread over
// EqualiseSpread has every contribution rescaled to the lower median of them (a pair ×4
// counts at the honest length, its batch weighting kept); inside the spread, with fewer
// than three contributions, or where the policy does not equalise, every contribution
// keeps its bits.
func TestEqualiseSizes(t *testing.T) {
	mk := func(scales ...float32) [][]float32 {
		var out [][]float32
		for _, s := range scales {
			out = append(out, []float32{s * 3, s * 4})
		}
		return out
	}
	members := []string{"a", "b", "c", "d"}
	pol := policy{equalise: true}
	for _, c := range []struct {
		name   string
		pol    policy
		all    [][]float32
		change bool
	}{
		{"honest", pol, mk(1, 1.2, 0.9, 1.1), false},
		{"off", policy{}, mk(1, 1, 4, 4), false},
		{"two", pol, [][]float32{{3, 4}, nil, nil, {12, 16}}, false},
		{"pair ×4", pol, [][]float32{{3, 4}, {4, 3}, {12, 16}, {16, 12}}, true},
	} {
		before := make([][]float32, len(c.all))
		for m, v := range c.all {
			before[m] = slices.Clone(v)
		}
		c.pol.equaliseSizes(members, c.all)
		same := true
		for m := range c.all {
			same = same && slices.Equal(before[m], c.all[m])
		}
		if same == c.change {
			t.Errorf("%s: changed %v, want %v", c.name, !same, c.change)
		}
		if c.change {
			for m, v := range c.all {
				if n := norm2(v); math.Abs(n-5) > 1e-5 {
					t.Errorf("%s: contribution %d has norm %g, want the lower median 5", c.name, m, n)
				}
			}
		}
	}
	// Unequal batches: b's batch is twice a's and c's, so its honest gradient is twice as
	// long and is not a size to even out; d's ×4 per sequence is, and counts at 5 per
	// sequence.
	unequal := policy{equalise: true, batches: map[string]float64{"a": 2, "b": 4, "c": 2, "d": 2}}
	all := [][]float32{{3, 4}, {8, 6}, {4, 3}, {12, 16}}
	unequal.equaliseSizes(members, all)
	for m, want := range []float64{5, 10, 5, 5} {
		if n := norm2(all[m]); math.Abs(n-want) > 1e-5 {
			t.Errorf("unequal batches: contribution %d has norm %g, want %g", m, n, want)
		}
	}
}
