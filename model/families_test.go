package model

import (
	"bytes"
	"math"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device/devicetest"
)

// tinyFamilies are small models of each family for the tests below.
var tinyFamilies = map[string]Config{
	"gpt":          {Layers: 2, DModel: 16, Heads: 2, Context: 8, Vocab: 37},
	"gpt2":         {Family: jobspec.FamilyGPT2, Layers: 2, DModel: 16, Heads: 2, Context: 8, Vocab: 37},
	"llama":        {Family: jobspec.FamilyLlama, Layers: 2, DModel: 16, Heads: 4, KVHeads: 2, Intermediate: 24, Context: 8, Vocab: 37},
	"llama-tied":   {Family: jobspec.FamilyLlama, Layers: 2, DModel: 16, Heads: 4, KVHeads: 1, Intermediate: 24, Context: 8, Vocab: 37, Tied: true},
	"llama-no-gqa": {Family: jobspec.FamilyLlama, Layers: 1, DModel: 12, Heads: 2, Context: 8, Vocab: 37, RopeTheta: 500000, NormEps: 1e-6},
}

func familyBatch(cfg Config, B int) *Batch {
	mb := &Batch{B: B, T: cfg.Context, Inputs: make([]int32, B*cfg.Context), Targets: make([]int32, B*cfg.Context)}
	for i := range mb.Inputs {
		mb.Inputs[i] = int32((i*7 + 3) % cfg.Vocab)
		mb.Targets[i] = int32((i*5 + 1) % cfg.Vocab)
	}
	return mb
}

// TestFamilyLayerCostsCountTheParameters: the cost model's parameter bytes are the
// model's, layer by layer, for every family (a tied lm_head counted once, in the embedding).
func TestFamilyLayerCostsCountTheParameters(t *testing.T) {
	for name, cfg := range tinyFamilies {
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		g := New(cfg, 1)
		costs := cfg.LayerCosts()
		if len(costs) != len(g.Layers) {
			t.Fatalf("%s: %d costs for %d layers", name, len(costs), len(g.Layers))
		}
		var total int
		for i, l := range g.Layers {
			n := 0
			for _, p := range l.Params() {
				n += len(p.Value.Data)
			}
			total += n
			if costs[i].ParamBytes != int64(4*n) || costs[i].Name != l.Name() {
				t.Errorf("%s: layer %s costs %d param bytes, has %d", name, l.Name(), costs[i].ParamBytes, 4*n)
			}
		}
		if want := jobspec.Model(cfg).ParamCount(); float64(total) != want {
			t.Errorf("%s: %d parameters, jobspec counts %v", name, total, want)
		}
	}
}

// TestTiedHeadSharesTheEmbedding: a tied model lists the token table once, and its
// gradient is the sum of the embedding's and the head's uses (the untied model's two
// gradients added, from the same weights).
func TestTiedHeadSharesTheEmbedding(t *testing.T) {
	for _, name := range []string{"gpt2", "llama-tied"} {
		cfg := tinyFamilies[name]
		tied := New(cfg, 3)
		untiedCfg := cfg
		untiedCfg.Tied, untiedCfg.Family = false, jobspec.FamilyLlama
		if cfg.Family == jobspec.FamilyGPT2 {
			untiedCfg.Family = jobspec.FamilyGPT
		}
		untied := New(untiedCfg, 3)
		if len(untied.Params()) != len(tied.Params())+1 {
			t.Fatalf("%s: %d params tied, %d untied", name, len(tied.Params()), len(untied.Params()))
		}
		wte := tied.Params()[0]
		for _, p := range untied.Params() {
			if p.Name == "lm_head.weight" {
				copy(p.Value.Data, wte.Value.Data)
			} else {
				copy(p.Value.Data, paramByName(tied, p.Name).Value.Data)
			}
		}
		mb := familyBatch(cfg, 2)
		var ws1, ws2 Workspace
		l1 := ForwardBackward(&ws1, tied.Layers, mb, 1)
		l2 := ForwardBackward(&ws2, untied.Layers, mb, 1)
		if l1 != l2 {
			t.Fatalf("%s: loss %v tied, %v untied from the same weights", name, l1, l2)
		}
		emb, head := untied.Params()[0].Grad.Data, paramByName(untied, "lm_head.weight").Grad.Data
		for i, g := range wte.Grad.Data {
			if want := emb[i] + head[i]; math.Abs(float64(g-want)) > 1e-6*(1+math.Abs(float64(want))) {
				t.Fatalf("%s: d%s[%d] = %v, embedding + head give %v", name, wte.Name, i, g, want)
			}
		}
	}
}

func paramByName(g *GPT, name string) *Param {
	for _, p := range g.Params() {
		if p.Name == name {
			return p
		}
	}
	panic("no parameter " + name)
}

// TestTiedStagesComputeTheWholeModelsBits: a tied model cut between the embedding and
// the head trains to the same bits as the whole model, for both tied families, when the
// head's stage starts from the embedding's table and its gradient of the table is added
// into the embedding's (what the pipeline does, model/tied.go).
func TestTiedStagesComputeTheWholeModelsBits(t *testing.T) {
	for _, name := range []string{"gpt2", "llama-tied"} {
		cfg := tinyFamilies[name]
		L := cfg.NumLayers()
		whole := New(cfg, 4)
		front, back := NewLayers(cfg, 4, 0, 2), NewLayers(cfg, 4, 2, L)
		e, h := TiedTables(front)
		if e == nil || h != nil {
			t.Fatalf("%s: the front stage's tables: embedding %v, head %v", name, e, h)
		}
		if e2, h2 := TiedTables(back); e2 != nil || h2 == nil {
			t.Fatalf("%s: the back stage's tables: embedding %v, head %v", name, e2, h2)
		}
		if _, hw := TiedTables(whole.Layers); &hw.Value.Data[0] != &whole.Params()[0].Value.Data[0] {
			t.Fatalf("%s: a whole model's head does not read the embedding's table", name)
		}
		_, hb := TiedTables(back)
		copy(hb.Value.Data, e.Value.Data) // what the embedding's stage sends before a step
		mb := familyBatch(cfg, 2)
		var ws1, ws2 Workspace
		want := ForwardBackward(&ws1, whole.Layers, mb, 1)
		// The split run: forward through both stages, backward through both, then the
		// head's gradient of the table joins the embedding's.
		var x []float32
		var saved []Saved
		stages := append(append([]Layer(nil), front...), back...)
		for _, l := range stages {
			var s Saved
			x, s = l.Forward(&ws2, mb, x)
			saved = append(saved, s)
		}
		if got := x[0]; math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("%s: loss %v split, %v whole", name, got, want)
		}
		dy := []float32{1}
		for i := len(stages) - 1; i >= 0; i-- {
			dy = stages[i].Backward(&ws2, mb, saved[i], dy)
		}
		AddTiedGrad(e, hb.Grad.Data)
		for i, p := range LayerParams(stages) {
			q := whole.Params()[i]
			for k := range p.Grad.Data {
				if math.Float32bits(p.Grad.Data[k]) != math.Float32bits(q.Grad.Data[k]) {
					t.Fatalf("%s: %s grad[%d] %g split, %g whole", name, p.Name, k, p.Grad.Data[k], q.Grad.Data[k])
				}
			}
		}
		if _, hw := TiedTables(whole.Layers); hw.Grad.Data[0] != 0 {
			t.Fatalf("%s: FoldTiedGrad left the head's gradient in place", name)
		}
	}
}

// TestFamiliesRecomputeExactly: every family trains with recomputation to the same bits.
func TestFamiliesRecomputeExactly(t *testing.T) {
	for name, cfg := range tinyFamilies {
		plain, re := New(cfg, 5), New(cfg, 5)
		mb := familyBatch(cfg, 3)
		var ws1, ws2 Workspace
		l1 := ForwardBackward(&ws1, plain.Layers, mb, 0.5)
		l2 := ForwardBackward(&ws2, WithRecompute(re.Layers), mb, 0.5)
		if l1 != l2 {
			t.Fatalf("%s: loss %v, recomputed %v", name, l1, l2)
		}
		for i, p := range plain.Params() {
			q := re.Params()[i]
			for j := range p.Grad.Data {
				if math.Float32bits(p.Grad.Data[j]) != math.Float32bits(q.Grad.Data[j]) {
					t.Fatalf("%s: %s grad[%d] %v, recomputed %v", name, p.Name, j, p.Grad.Data[j], q.Grad.Data[j])
				}
			}
		}
	}
}

// TestLlamaNamesAreHuggingFaces: the parameter names and shapes of a Llama block are
// LlamaForCausalLM's.
func TestLlamaNamesAreHuggingFaces(t *testing.T) {
	cfg := tinyFamilies["llama"]
	got := map[string][]int{}
	for _, p := range New(cfg, 1).Params() {
		got[p.Name] = p.Value.Shape
	}
	want := map[string][]int{
		"model.embed_tokens.weight":                      {37, 16},
		"model.layers.1.input_layernorm.weight":          {16},
		"model.layers.1.self_attn.q_proj.weight":         {16, 16},
		"model.layers.1.self_attn.k_proj.weight":         {8, 16},
		"model.layers.1.self_attn.v_proj.weight":         {8, 16},
		"model.layers.1.self_attn.o_proj.weight":         {16, 16},
		"model.layers.1.post_attention_layernorm.weight": {16},
		"model.layers.1.mlp.gate_proj.weight":            {24, 16},
		"model.layers.1.mlp.up_proj.weight":              {24, 16},
		"model.layers.1.mlp.down_proj.weight":            {16, 24},
		"model.norm.weight":                              {16},
		"lm_head.weight":                                 {37, 16},
	}
	for n, s := range want {
		if g, ok := got[n]; !ok || len(g) != len(s) || g[0] != s[0] || (len(s) > 1 && g[1] != s[1]) {
			t.Errorf("%s: shape %v, want %v", n, g, s)
		}
	}
	if len(got) != 2+2*9+1 {
		t.Errorf("%d parameters, want %d", len(got), 2+2*9+1)
	}
}

// TestFamiliesRunOnADeviceBackend: every family trains on the emulated device (tensors the
// host reaches only through copies) to the CPU's bits, plain and recomputed.
func TestFamiliesRunOnADeviceBackend(t *testing.T) {
	for name, cfg := range tinyFamilies {
		for _, recompute := range []bool{false, true} {
			host, dev := New(cfg, 7), New(cfg, 7)
			hl, dl := host.Layers, dev.Layers
			if recompute {
				hl, dl = WithRecompute(hl), WithRecompute(dl)
			}
			mb := familyBatch(cfg, 2)
			l1 := ForwardBackward(&Workspace{}, hl, mb, 1)
			l2 := ForwardBackward(&Workspace{Backend: devicetest.NewEmulated()}, dl, mb, 1)
			if math.Float32bits(l1) != math.Float32bits(l2) {
				t.Fatalf("%s, recompute %v: loss %v on the CPU, %v on the emulated device", name, recompute, l1, l2)
			}
			for i, p := range host.Params() {
				for k, a := range p.Grad.Data {
					if b := dev.Params()[i].Grad.Data[k]; math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("%s, recompute %v: %s[%d] %v on the CPU, %v on the device", name, recompute, p.Name, k, a, b)
					}
				}
			}
		}
	}
}

// TestFamilyConfigFromCheckpoint: a checkpoint of each family, written with its
// metadata, gives back the model's configuration, and its tensors load into a new model.
func TestFamilyConfigFromCheckpoint(t *testing.T) {
	for name, cfg := range tinyFamilies {
		g := New(cfg, 2)
		var buf bytes.Buffer
		if err := EncodeSafetensors(&buf, ParamTensors(g.Params()), cfg.Metadata()); err != nil {
			t.Fatal(err)
		}
		tf, err := DecodeSafetensors(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		got, err := ConfigFromCheckpoint(tf, 0)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		norm := func(c Config) jobspec.Model {
			m := jobspec.Model(c)
			m.KVHeads, m.Intermediate, m.RopeTheta, m.NormEps, m.Tied = m.KVHeadCount(), m.Hidden(), 0, m.Eps(), m.TiedHead()
			if m.Family == "" {
				m.Family = jobspec.FamilyGPT
			}
			return m
		}
		if norm(got) != norm(cfg) || (cfg.Family == jobspec.FamilyLlama && got.theta() != cfg.theta()) {
			t.Fatalf("%s: config %+v from its checkpoint, want %+v", name, got, cfg)
		}
		if err := LoadParams(tf, New(got, 9).Params()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// BenchmarkFamilyStep is one forward and backward pass of batch 16 of the default shape
// (4 layers, d 128, 4 heads, context 128) in each family, Llama's MLP width chosen for
// the same parameter count as GPT's (3·352 ≈ 8·128):
//
//	go test ./model -run X -bench FamilyStep -cpu 1 -count 6
func BenchmarkFamilyStep(b *testing.B) {
	base := Config{Layers: 4, DModel: 128, Heads: 4, Context: 128, Vocab: 256}
	llama := base
	llama.Family, llama.KVHeads, llama.Intermediate = jobspec.FamilyLlama, 2, 352
	gpt2 := base
	gpt2.Family = jobspec.FamilyGPT2
	for _, c := range []struct {
		name string
		cfg  Config
	}{{"gpt", base}, {"gpt2", gpt2}, {"llama-gqa", llama}} {
		b.Run(c.name, func(b *testing.B) {
			g := New(c.cfg, 1)
			mb := familyBatch(c.cfg, 16)
			var ws Workspace
			b.ReportAllocs()
			for b.Loop() {
				ws.Reset()
				ForwardBackward(&ws, g.Layers, mb, 1)
			}
			b.ReportMetric(float64(mb.Rows())*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// TestFamilyStagesHoldTheWholeModelsWeights: a stage built alone (NewLayers of its range)
// holds exactly the weights of the same layers of a whole model, for every family; a
// stage chain trains to the whole model's loss.
func TestFamilyStagesHoldTheWholeModelsWeights(t *testing.T) {
	for _, name := range []string{"gpt", "llama", "llama-no-gqa"} {
		cfg := tinyFamilies[name]
		whole := New(cfg, 4)
		var stages []Layer
		for _, r := range [][2]int{{0, 1}, {1, 2}, {2, cfg.NumLayers()}} {
			stages = append(stages, NewLayers(cfg, 4, r[0], r[1])...)
		}
		for i, p := range LayerParams(stages) {
			q := whole.Params()[i]
			if p.Name != q.Name {
				t.Fatalf("%s: parameter %d is %s in stages, %s whole", name, i, p.Name, q.Name)
			}
			for k := range p.Value.Data {
				if math.Float32bits(p.Value.Data[k]) != math.Float32bits(q.Value.Data[k]) {
					t.Fatalf("%s: %s[%d] differs between a stage and the whole model", name, p.Name, k)
				}
			}
		}
		mb := familyBatch(cfg, 2)
		var ws1, ws2 Workspace
		if a, b := ForwardBackward(&ws1, whole.Layers, mb, 1), ForwardBackward(&ws2, stages, mb, 1); a != b {
			t.Fatalf("%s: loss %v whole, %v in stages", name, a, b)
		}
	}
}
