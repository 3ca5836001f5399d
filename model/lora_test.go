package model

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/device/devicetest"
)

// loraFamilies are a tiny model of each family with every linear layer adapted.
var loraFamilies = map[string]Config{
	"gpt2":  tinyFamilies["gpt2"],
	"llama": tinyFamilies["llama"],
}

var everyTarget = LoRA{Rank: 3, Alpha: 6, Targets: []string{"attn", "mlp"}}

// adapted builds cfg's model from seed with lo's adapters, every weight (base and
// adapters, B away from zero) perturbed as TestGPTGradientsMatchFiniteDifferences does, so
// that every term of the adapters' gradients matters and stands above float32's noise.
func adapted(t *testing.T, cfg Config, lo LoRA, recompute bool) *GPT {
	t.Helper()
	g := New(cfg, 7)
	if recompute {
		g.Layers = WithRecompute(g.Layers)
	}
	layers, err := WithLoRA(cfg, g.Layers, lo, 11)
	if err != nil {
		t.Fatal(err)
	}
	g.Layers = layers
	var n int64
	for _, p := range g.Params() {
		n += int64(p.Value.Size())
	}
	if want, _ := LoRAParamCount(cfg, lo); n != want { // through every wrapper
		t.Fatalf("recompute %v: %d adapter parameters, want %d", recompute, n, want)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for _, p := range append(BaseParams(g.Layers), g.Params()...) {
		for i := range p.Value.Data {
			p.Value.Data[i] += float32(rng.NormFloat64() * 0.3)
		}
	}
	return g
}

// TestLoRAGradientsMatchFiniteDifferences checks every adapter's gradient against central
// differences of the whole model's loss, in both families, plain and recomputed. Block
// 0's adapters are reached through block 1's adapted backward pass, so the adapters' dx
// is checked too.
func TestLoRAGradientsMatchFiniteDifferences(t *testing.T) {
	for name, cfg := range loraFamilies {
		for _, recompute := range []bool{false, true} {
			g := adapted(t, cfg, everyTarget, recompute)
			mb := familyBatch(cfg, 2)
			ws := &Workspace{}
			ZeroGrads(g.Layers)
			ForwardBackward(ws, g.Layers, mb, 1)
			// The loss is summed from the rows' float64 losses (not the float32 mean, whose
			// rounding would dominate the differences), and eps is small: the adapters enter
			// the loss through a product of perturbed weights, whose curvature puts a central
			// difference at 1e-2 several percent off on some elements.
			rows := make([]float64, mb.Rows())
			loss := func() float64 {
				ws.Reset()
				mb.RowLoss = rows
				defer func() { mb.RowLoss = nil }()
				Loss(ws, g.Layers, mb)
				var s float64
				for _, l := range rows {
					s += l
				}
				return s / float64(len(rows))
			}
			const eps = 3e-3
			diff := func(p *Param, i int) float64 {
				orig := p.Value.Data[i]
				p.Value.Data[i] = orig + eps
				lp := loss()
				p.Value.Data[i] = orig - eps
				lm := loss()
				p.Value.Data[i] = orig
				return (lp - lm) / (2 * eps)
			}
			for _, p := range g.Params() {
				var worst float64
				stride := max(1, p.Value.Size()/16)
				for i := 0; i < p.Value.Size(); i += stride {
					num, ana := diff(p, i), float64(p.Grad.Data[i])
					rel := math.Abs(num-ana) / (1e-2 + math.Abs(num) + math.Abs(ana)) // 1e-2: float32 noise is ~1e-4 here
					worst = max(worst, rel)
					if rel > 3e-2 {
						t.Errorf("%s recompute=%v %s[%d]: analytic %.6g, numeric %.6g", name, recompute, p.Name, i, ana, num)
						break
					}
				}
				if !recompute {
					t.Logf("%s %-44s worst relative error %.2g", name, p.Name, worst)
				}
			}
		}
	}
}

// TestLoRAStartsAsTheBaseAndTrainsOnlyAdapters: B is zero, so the adapted model computes
// the base's loss bit for bit; Params lists the adapters alone (their count the analytic
// one), the base is frozen, keeps no gradient and does not move in training.
func TestLoRAStartsAsTheBaseAndTrainsOnlyAdapters(t *testing.T) {
	for name, cfg := range loraFamilies {
		base := New(cfg, 7)
		mb := familyBatch(cfg, 2)
		want := Loss(&Workspace{}, base.Layers, mb)
		g := New(cfg, 7)
		layers, err := WithLoRA(cfg, g.Layers, LoRA{Rank: 2, Targets: []string{"attn"}}, 3)
		if err != nil {
			t.Fatal(err)
		}
		g.Layers = layers
		if got := Loss(&Workspace{}, g.Layers, mb); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("%s: adapted loss %v, base %v", name, got, want)
		}
		var n int64
		for _, p := range g.Params() {
			if !isAdapter(p.Name) || p.Frozen {
				t.Fatalf("%s: trainable %s is not an adapter", name, p.Name)
			}
			n += int64(p.Value.Size())
		}
		analytic, _ := LoRAParamCount(cfg, LoRA{Rank: 2, Targets: []string{"attn"}})
		if n != analytic {
			t.Fatalf("%s: %d adapter parameters, analytic %d", name, n, analytic)
		}
		for _, p := range BaseParams(g.Layers) {
			if !p.Frozen || p.Grad != nil {
				t.Fatalf("%s: base %s is not frozen", name, p.Name)
			}
		}
		before := MergedWeights(layers) // B = 0: the base itself
		ZeroGrads(g.Layers)
		ForwardBackward(&Workspace{}, g.Layers, mb, 1)
		for _, p := range BaseParams(g.Layers) {
			for i, v := range p.Value.Data {
				if math.Float32bits(v) != math.Float32bits(before[p.Name].Data[i]) {
					t.Fatalf("%s: base %s changed in a backward pass", name, p.Name)
				}
			}
		}
	}
}

// TestLoRAMergedWeightsComputeTheAdaptedModel: a plain model loaded with MergedWeights
// computes the adapted model's loss, and each merged weight is W + scale·B·A (checked here
// against a product written independently, for every adapted tensor).
func TestLoRAMergedWeightsComputeTheAdaptedModel(t *testing.T) {
	for name, cfg := range loraFamilies {
		g := adapted(t, cfg, everyTarget, false)
		merged := MergedWeights(g.Layers)
		for _, l := range g.Layers {
			for _, tg := range l.(*LoRALayer).targets {
				checkMerged(t, name, tg, merged[tg.w.Name].Data)
			}
		}
		plain := New(cfg, 1)
		if err := LoadParams(&TensorFile{Tensors: merged}, plain.Params()); err != nil {
			t.Fatal(err)
		}
		mb := familyBatch(cfg, 2)
		a, b := Loss(&Workspace{}, g.Layers, mb), Loss(&Workspace{}, plain.Layers, mb)
		if math.Abs(float64(a-b)) > 1e-5*math.Abs(float64(a)) {
			t.Fatalf("%s: adapted loss %v, merged %v", name, a, b)
		}
	}
}

func checkMerged(t *testing.T, name string, tg loraTarget, got []float32) {
	t.Helper()
	ad := tg.ad
	for i := range ad.in {
		for o := range ad.out {
			var ba float64
			for k := ad.rank - 1; k >= 0; k-- {
				ba += float64(ad.b.Value.Data[o*ad.rank+k]) * float64(ad.a.Value.Data[k*ad.in+i])
			}
			idx := o*ad.in + i
			if tg.inOutLay {
				idx = i*ad.out + o
			}
			want := float64(tg.w.Value.Data[idx]) + float64(ad.scale)*ba
			if math.Abs(float64(got[idx])-want) > 1e-6*(1+math.Abs(want)) {
				t.Fatalf("%s %s[%d]: merged %v, want %v", name, tg.w.Name, idx, got[idx], want)
			}
		}
	}
}

// TestLoRAPEFTExportReloads: the adapters written as a PEFT directory (PEFT's names and
// config) load into a new adapted model of the same base, which then computes the same
// loss bit for bit.
func TestLoRAPEFTExportReloads(t *testing.T) {
	for name, cfg := range loraFamilies {
		lo := LoRA{Rank: 4, Alpha: 8, Targets: []string{"o", "down"}}
		g := adapted(t, cfg, lo, false)
		dir := filepath.Join(t.TempDir(), "adapter")
		if err := WritePEFTAdapter(dir, cfg, lo, g.Layers, "base"); err != nil {
			t.Fatal(err)
		}
		var pc map[string]any
		b, _ := os.ReadFile(filepath.Join(dir, PEFTConfigFile))
		if err := json.Unmarshal(b, &pc); err != nil || pc["r"] != 4.0 || pc["lora_alpha"] != 8.0 || pc["peft_type"] != "LORA" {
			t.Fatalf("%s: adapter_config.json %s (%v)", name, b, err)
		}
		raw, err := ReadSafetensors(filepath.Join(dir, PEFTWeightsFile))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"gpt2": "base_model.model.transformer.h.1.mlp.c_proj.lora_A.weight",
			"llama": "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight"}[name]
		if a, ok := raw.Tensors[want]; !ok || a.Shape[0] != 4 || a.Shape[1] != cfg.Hidden() {
			t.Fatalf("%s: no %s of shape [4 %d] among %d tensors", name, want, cfg.Hidden(), len(raw.Tensors))
		}
		lo2, tf, err := ReadPEFTAdapter(dir, cfg.FamilyName())
		if err != nil {
			t.Fatal(err)
		}
		base := New(cfg, 1) // then given g's (perturbed) base weights
		if err := LoadParams(&TensorFile{Tensors: ParamTensors(BaseParams(g.Layers))}, base.Params()); err != nil {
			t.Fatal(err)
		}
		reloaded, err := WithLoRA(cfg, base.Layers, lo2, 99)
		if err != nil {
			t.Fatal(err)
		}
		if err := LoadParams(tf, LayerParams(reloaded)); err != nil {
			t.Fatal(err)
		}
		mb := familyBatch(cfg, 2)
		l1, l2 := Loss(&Workspace{}, g.Layers, mb), Loss(&Workspace{}, reloaded, mb)
		if math.Float32bits(l1) != math.Float32bits(l2) {
			t.Fatalf("%s: loss %v before export, %v after reload", name, l1, l2)
		}
	}
}

func TestLoRARefusesBadConfigs(t *testing.T) {
	cfg := loraFamilies["llama"]
	for _, lo := range []LoRA{{Rank: 0}, {Rank: 2, Targets: []string{"c_attn"}}} {
		if _, err := WithLoRA(cfg, New(cfg, 1).Layers, lo, 1); err == nil {
			t.Errorf("WithLoRA(%+v) accepted", lo)
		}
	}
	layers, _ := WithLoRA(cfg, New(cfg, 1).Layers, LoRA{Rank: 2}, 1)
	if _, err := WithLoRA(cfg, layers, LoRA{Rank: 2}, 1); err == nil {
		t.Error("WithLoRA accepted layers that already have adapters")
	}
	if cfg.FamilyName() != jobspec.FamilyLlama {
		t.Fatal("loraFamilies changed")
	}
}

// TestLoRARunsOnADeviceBackend: an adapted model of each family, plain and recomputed,
// computes on the emulated device (tensors reached only through copies) the CPU's loss and
// adapter gradients, bit for bit.
func TestLoRARunsOnADeviceBackend(t *testing.T) {
	for name, cfg := range loraFamilies {
		for _, recompute := range []bool{false, true} {
			host, dev := adapted(t, cfg, everyTarget, recompute), adapted(t, cfg, everyTarget, recompute)
			mb := familyBatch(cfg, 2)
			ZeroGrads(host.Layers)
			ZeroGrads(dev.Layers)
			l1 := ForwardBackward(&Workspace{}, host.Layers, mb, 1)
			l2 := ForwardBackward(&Workspace{Backend: devicetest.NewEmulated()}, dev.Layers, mb, 1)
			if math.Float32bits(l1) != math.Float32bits(l2) {
				t.Fatalf("%s recompute=%v: loss %v on the CPU, %v on the device", name, recompute, l1, l2)
			}
			for i, p := range host.Params() {
				for k, a := range p.Grad.Data {
					if b := dev.Params()[i].Grad.Data[k]; math.Float32bits(a) != math.Float32bits(b) {
						t.Fatalf("%s recompute=%v: %s[%d] %v on the CPU, %v on the device", name, recompute, p.Name, k, a, b)
					}
				}
			}
		}
	}
}

// TestReadPEFTAdapterRefusesWhatItCannotCompute: PEFT settings that change what the
// adapters compute are refused by name instead of loading into a model that computes
// something else.
func TestReadPEFTAdapterRefusesWhatItCannotCompute(t *testing.T) {
	cfg := loraFamilies["llama"]
	g := adapted(t, cfg, everyTarget, false)
	for _, c := range []struct{ key, value, want string }{
		{"use_rslora", "true", "use_rslora"},
		{"use_dora", "true", "use_dora"},
		{"rank_pattern", `{"q_proj": 4}`, "rank_pattern"},
		{"bias", `"all"`, `bias "all"`},
		{"fan_in_fan_out", "true", "fan_in_fan_out true for the llama family"},
		{"peft_type", `"IA3"`, "peft_type must be LORA"},
		{"target_modules", `["q_proj", "lm_head"]`, `unknown target "lm_head"`},
	} {
		dir := filepath.Join(t.TempDir(), "adapter")
		if err := WritePEFTAdapter(dir, cfg, everyTarget, g.Layers, ""); err != nil {
			t.Fatal(err)
		}
		var pc map[string]json.RawMessage
		b, _ := os.ReadFile(filepath.Join(dir, PEFTConfigFile))
		if err := json.Unmarshal(b, &pc); err != nil {
			t.Fatal(err)
		}
		pc[c.key] = json.RawMessage(c.value)
		b, _ = json.Marshal(pc)
		if err := os.WriteFile(filepath.Join(dir, PEFTConfigFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadPEFTAdapter(dir, cfg.FamilyName()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %s: %v, want an error naming %q", c.key, c.value, err, c.want)
		}
	}
}
