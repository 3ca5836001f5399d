package model

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func tinyConfig() Config { return Config{Layers: 2, DModel: 8, Heads: 2, Context: 6, Vocab: 11} }

func tinyBatch(cfg Config, B int, seed uint64) *Batch {
	rng := rand.New(rand.NewPCG(seed, 99))
	mb := &Batch{B: B, T: cfg.Context, Inputs: make([]int32, B*cfg.Context), Targets: make([]int32, B*cfg.Context)}
	for i := range mb.Inputs {
		mb.Inputs[i] = int32(rng.IntN(cfg.Vocab))
		mb.Targets[i] = int32(rng.IntN(cfg.Vocab))
	}
	return mb
}

// TestGPTGradientsMatchFiniteDifferences checks the gradient of every parameter tensor of
// a whole small GPT against central differences of the loss.
func TestGPTGradientsMatchFiniteDifferences(t *testing.T) {
	cfg := tinyConfig()
	g := New(cfg, 7)
	// Larger weights and non-trivial LayerNorm parameters make every term matter.
	rng := rand.New(rand.NewPCG(1, 1))
	for _, p := range g.Params() {
		for i := range p.Value.Data {
			p.Value.Data[i] += float32(rng.NormFloat64() * 0.3)
		}
	}
	mb := tinyBatch(cfg, 2, 3)
	ws := &Workspace{}
	ZeroGrads(g.Layers)
	ForwardBackward(ws, g.Layers, mb, 1)
	loss := func() float64 {
		ws.Reset()
		return float64(Loss(ws, g.Layers, mb))
	}
	const eps = 1e-2
	for _, p := range g.Params() {
		var worst float64
		stride := max(1, p.Value.Size()/24)
		for i := 0; i < p.Value.Size(); i += stride {
			orig := p.Value.Data[i]
			p.Value.Data[i] = orig + eps
			lp := loss()
			p.Value.Data[i] = orig - eps
			lm := loss()
			p.Value.Data[i] = orig
			num, ana := (lp-lm)/(2*eps), float64(p.Grad.Data[i])
			rel := math.Abs(num-ana) / (1e-3 + math.Abs(num) + math.Abs(ana))
			worst = max(worst, rel)
			if rel > 3e-2 {
				t.Errorf("%s[%d]: analytic %.6g, numeric %.6g", p.Name, i, ana, num)
				break
			}
		}
		t.Logf("%-36s worst relative error %.2g", p.Name, worst)
	}
}

func TestGPTHasSpecNamesShapesAndInit(t *testing.T) {
	cfg := Config{Layers: 3, DModel: 16, Heads: 4, Context: 8, Vocab: 256}
	g := New(cfg, 1)
	shapes := map[string][]int{}
	for _, p := range g.Params() {
		if _, dup := shapes[p.Name]; dup {
			t.Fatalf("duplicate parameter %s", p.Name)
		}
		shapes[p.Name] = p.Value.Shape
	}
	want := map[string][]int{
		"transformer.wte.weight": {256, 16}, "transformer.wpe.weight": {8, 16},
		"transformer.h.2.attn.c_attn.weight": {16, 48}, "transformer.h.2.attn.c_attn.bias": {48},
		"transformer.h.0.attn.c_proj.weight": {16, 16}, "transformer.h.1.mlp.c_fc.weight": {16, 64},
		"transformer.h.1.mlp.c_proj.weight": {64, 16}, "transformer.h.0.ln_2.bias": {16},
		"transformer.ln_f.weight": {16}, "lm_head.weight": {256, 16},
	}
	for n, s := range want {
		got, ok := shapes[n]
		if !ok || len(got) != len(s) || got[0] != s[0] || (len(s) == 2 && got[1] != s[1]) {
			t.Errorf("%s: shape %v, want %v", n, got, s)
		}
	}
	if len(shapes) != 2+12*3+3 {
		t.Errorf("%d tensors, want %d", len(shapes), 2+12*3+3)
	}
	std := func(name string) float64 {
		for _, p := range g.Params() {
			if p.Name == name {
				var s float64
				for _, v := range p.Value.Data {
					s += float64(v) * float64(v)
				}
				return math.Sqrt(s / float64(p.Value.Size()))
			}
		}
		t.Fatalf("no %s", name)
		return 0
	}
	if s := std("transformer.wte.weight"); math.Abs(s-0.02) > 0.002 {
		t.Errorf("wte std %.4f, want 0.02", s)
	}
	if s, w := std("transformer.h.0.mlp.c_proj.weight"), 0.02/math.Sqrt(6); math.Abs(s-w) > 0.1*w {
		t.Errorf("residual projection std %.4f, want %.4f", s, w)
	}
	if s := std("transformer.h.0.ln_1.weight"); s != 1 {
		t.Errorf("LayerNorm weight rms %g, want 1", s)
	}
	if s := std("transformer.h.0.attn.c_attn.bias"); s != 0 {
		t.Errorf("bias rms %g, want 0", s)
	}
}

// TestStageSlicesInitLikeWholeModel: a pipeline stage that builds only its layers holds
// the same weights as the whole model.
func TestStageSlicesInitLikeWholeModel(t *testing.T) {
	cfg := tinyConfig()
	whole := New(cfg, 5)
	part := NewLayers(cfg, 5, 2, 4)
	for i, l := range part {
		a, b := whole.Layers[2+i].Params(), l.Params()
		for j := range a {
			for k := range a[j].Value.Data {
				if a[j].Value.Data[k] != b[j].Value.Data[k] {
					t.Fatalf("%s differs between the whole model and a stage", a[j].Name)
				}
			}
		}
	}
}

// TestMicroBatchesAccumulateLikeOneBatch: gradients of M micro-batches weighted 1/M equal
// the gradient of the whole batch.
func TestMicroBatchesAccumulateLikeOneBatch(t *testing.T) {
	cfg := tinyConfig()
	full := tinyBatch(cfg, 4, 8)
	g1, g2 := New(cfg, 2), New(cfg, 2)
	ws := &Workspace{}
	ForwardBackward(ws, g1.Layers, full, 1)
	T := cfg.Context
	for m := 0; m < 2; m++ {
		half := &Batch{B: 2, T: T, Inputs: full.Inputs[m*2*T : (m+1)*2*T], Targets: full.Targets[m*2*T : (m+1)*2*T]}
		ForwardBackward(ws, g2.Layers, half, 0.5)
	}
	p1, p2 := g1.Params(), g2.Params()
	for i := range p1 {
		for k := range p1[i].Grad.Data {
			a, b := p1[i].Grad.Data[k], p2[i].Grad.Data[k]
			if math.Abs(float64(a-b)) > 1e-5*(1+math.Abs(float64(a))) {
				t.Fatalf("%s[%d]: whole batch %g, two micro-batches %g", p1[i].Name, k, a, b)
			}
		}
	}
}

func TestWorkspaceReusesMemory(t *testing.T) {
	cfg := tinyConfig()
	g := New(cfg, 1)
	mb := tinyBatch(cfg, 2, 1)
	ws := &Workspace{}
	ForwardBackward(ws, g.Layers, mb, 1)
	held := ws.Bytes()
	for i := 0; i < 3; i++ {
		ws.Reset()
		ForwardBackward(ws, g.Layers, mb, 1)
	}
	if ws.Bytes() != held {
		t.Fatalf("workspace grew from %d to %d bytes over identical steps", held, ws.Bytes())
	}
}

func TestConfigValidateNamesFields(t *testing.T) {
	err := Config{Layers: 0, DModel: 10, Heads: 3, Context: 8, Vocab: 256}.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"layers must be ≥ 1 (got 0)", "d-model (10) must be divisible by heads (3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLayerCostsCoverLayerList(t *testing.T) {
	cfg := DefaultConfig()
	costs := cfg.LayerCosts()
	if len(costs) != cfg.NumLayers() {
		t.Fatalf("%d costs for %d layers", len(costs), cfg.NumLayers())
	}
	g := New(cfg, 1)
	for i, l := range g.Layers {
		if costs[i].Name != l.Name() {
			t.Errorf("cost %d named %s, layer %s", i, costs[i].Name, l.Name())
		}
		var n int64
		for _, p := range l.Params() {
			n += int64(p.Value.Size())
		}
		if costs[i].ParamBytes != 4*n || costs[i].OptimizerBytes != 8*n {
			t.Errorf("%s: cost says %d param bytes, layer holds %d", l.Name(), costs[i].ParamBytes, 4*n)
		}
	}
	// A block's forward is dominated by 24·d² FLOPs per token; backward is twice that.
	b := costs[1]
	if d := float64(cfg.DModel); b.ForwardFLOPsPerToken < 24*d*d || b.BackwardFLOPsPerToken != 2*b.ForwardFLOPsPerToken {
		t.Errorf("block cost %+v", b)
	}
}
