package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
)

// The files of a PEFT adapter directory (what peft.PeftModel.from_pretrained reads).
const (
	PEFTConfigFile  = "adapter_config.json"
	PEFTWeightsFile = "adapter_model.safetensors"
	// peftPrefix is what PEFT puts before the base model's module names.
	peftPrefix = "base_model.model."
)

// peftModuleNames are the module names PEFT's target_modules uses for each canonical
// module (a name matches a module whose path ends with "."+name).
var peftModuleNames = map[jobspec.Family]map[string]string{
	jobspec.FamilyLlama: {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj",
		"gate": "gate_proj", "up": "up_proj", "down": "down_proj"},
	jobspec.FamilyGPT: {"qkv": "c_attn", "o": "attn.c_proj", "up": "c_fc", "down": "mlp.c_proj"},
}

// peftConfig is the part of PEFT's LoraConfig that meshnode writes and reads.
type peftConfig struct {
	PeftType       string   `json:"peft_type"`
	TaskType       string   `json:"task_type"`
	R              int      `json:"r"`
	LoraAlpha      float64  `json:"lora_alpha"`
	TargetModules  []string `json:"target_modules"`
	LoraDropout    float64  `json:"lora_dropout"`
	Bias           string   `json:"bias"`
	FanInFanOut    bool     `json:"fan_in_fan_out"`
	InferenceMode  bool     `json:"inference_mode"`
	BaseModel      string   `json:"base_model_name_or_path"`
	ModulesToSave  []string `json:"modules_to_save"`
	InitLoraWeight bool     `json:"init_lora_weights"`
	// Read only, to refuse what meshnode's adapters do not compute.
	UseRSLoRA    bool           `json:"use_rslora,omitempty"`
	UseDoRA      bool           `json:"use_dora,omitempty"`
	RankPattern  map[string]any `json:"rank_pattern,omitempty"`
	AlphaPattern map[string]any `json:"alpha_pattern,omitempty"`
}

// unsupported names the first setting of pc that meshnode's adapters would not compute
// as PEFT does ("" when none).
func (pc peftConfig) unsupported(f jobspec.Family) string {
	switch {
	case pc.UseRSLoRA:
		return "use_rslora (a scale of alpha/√r)"
	case pc.UseDoRA:
		return "use_dora (weight-decomposed adapters)"
	case len(pc.RankPattern) > 0 || len(pc.AlphaPattern) > 0:
		return "rank_pattern/alpha_pattern (per-module ranks or alphas)"
	case pc.Bias != "" && pc.Bias != "none":
		return fmt.Sprintf("bias %q (trained biases)", pc.Bias)
	case len(pc.ModulesToSave) > 0:
		return "modules_to_save (fully trained modules beside the adapters)"
	case pc.FanInFanOut != (f != jobspec.FamilyLlama):
		return fmt.Sprintf("fan_in_fan_out %v for the %s family", pc.FanInFanOut, f)
	}
	return ""
}

func peftNames(f jobspec.Family) map[string]string {
	if f == jobspec.FamilyLlama {
		return peftModuleNames[jobspec.FamilyLlama]
	}
	return peftModuleNames[jobspec.FamilyGPT]
}

// WritePEFTAdapter writes layers' adapters (a whole model's, WithLoRA of lo) as a PEFT
// adapter directory: adapter_config.json and adapter_model.safetensors, tensors named
// base_model.model.<module>.lora_A.weight and .lora_B.weight. GPT-2's Conv1D layers are
// marked fan_in_fan_out, as PEFT marks them; the adapters' own layout is PEFT's in both
// families. base names the base model for base_model_name_or_path (may be empty).
func WritePEFTAdapter(dir string, cfg Config, lo LoRA, layers []Layer, base string) error {
	modules, err := lo.Modules("lora.targets", cfg.FamilyName())
	if err != nil {
		return err
	}
	names := peftNames(cfg.FamilyName())
	pc := peftConfig{PeftType: "LORA", TaskType: "CAUSAL_LM", R: lo.Rank, LoraAlpha: lo.Scale() * float64(lo.Rank),
		Bias: "none", FanInFanOut: cfg.FamilyName() != jobspec.FamilyLlama, InferenceMode: true, BaseModel: base,
		InitLoraWeight: true}
	for _, m := range modules {
		pc.TargetModules = append(pc.TargetModules, names[m])
	}
	tensors := map[string]*kernels.Tensor{}
	for _, p := range LayerParams(layers) {
		if !isAdapter(p.Name) {
			return fmt.Errorf("lora export: %s is not an adapter (build the layers with WithLoRA)", p.Name)
		}
		tensors[peftPrefix+p.Name] = p.Value
	}
	if len(tensors) == 0 {
		return errors.New("lora export: the model has no adapters")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lora export: %w", err)
	}
	b, _ := json.MarshalIndent(pc, "", "  ")
	if err := WriteFileAtomic(filepath.Join(dir, PEFTConfigFile), append(b, '\n')); err != nil {
		return fmt.Errorf("lora export: %w", err)
	}
	if err := WriteSafetensors(filepath.Join(dir, PEFTWeightsFile), tensors, map[string]string{"format": "pt"}); err != nil {
		return fmt.Errorf("lora export: %w", err)
	}
	return nil
}

func isAdapter(name string) bool {
	return strings.HasSuffix(name, ".lora_A.weight") || strings.HasSuffix(name, ".lora_B.weight")
}

// ReadPEFTAdapter reads a PEFT adapter directory for a model of family f: the LoRA
// configuration it describes and its tensors under meshnode's names (PEFT's prefix
// removed), ready for LoadParams on WithLoRA's layers.
func ReadPEFTAdapter(dir string, f jobspec.Family) (LoRA, *TensorFile, error) {
	b, err := os.ReadFile(filepath.Join(dir, PEFTConfigFile))
	if err != nil {
		return LoRA{}, nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	var pc peftConfig
	if err := json.Unmarshal(b, &pc); err != nil {
		return LoRA{}, nil, fmt.Errorf("%w: %s: %v", ErrBadCheckpoint, PEFTConfigFile, err)
	}
	if pc.PeftType != "LORA" {
		return LoRA{}, nil, fmt.Errorf("%w: %s: peft_type must be LORA, got %q", ErrBadCheckpoint, PEFTConfigFile, pc.PeftType)
	}
	if u := pc.unsupported(f); u != "" {
		return LoRA{}, nil, fmt.Errorf("%w: %s: %s is not supported", ErrBadCheckpoint, PEFTConfigFile, u)
	}
	lo := LoRA{Rank: pc.R, Alpha: pc.LoraAlpha, Targets: pc.TargetModules}
	if err := lo.Check(PEFTConfigFile, f); err != nil {
		return LoRA{}, nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	tf, err := ReadSafetensors(filepath.Join(dir, PEFTWeightsFile))
	if err != nil {
		return LoRA{}, nil, err
	}
	out := &TensorFile{Tensors: map[string]*kernels.Tensor{}, Metadata: tf.Metadata}
	for name, t := range tf.Tensors {
		out.Tensors[strings.TrimPrefix(name, peftPrefix)] = t
	}
	return lo, out, nil
}

// MergedWeights returns every base weight of layers under its own name, each targeted
// linear layer's with its adapter merged in (W + scale·B·A, transposed for GPT-2's [in,
// out] layout): the weights of a plain model that computes what the adapted one does.
// The layers are not modified.
func MergedWeights(layers []Layer) map[string]*kernels.Tensor {
	out := map[string]*kernels.Tensor{}
	for _, p := range BaseParams(layers) {
		out[p.Name] = p.Value.Clone()
	}
	for _, l := range layers {
		ll, ok := l.(*LoRALayer)
		if !ok {
			continue
		}
		for _, t := range ll.targets {
			mergeAdapter(out[t.w.Name].Data, t.ad, t.inOutLay)
		}
	}
	return out
}

// mergeAdapter adds scale·B·A to w ([out, in]), or its transpose to w ([in, out]) when
// inOut. Each element's sum over the rank is taken in float64.
func mergeAdapter(w []float32, ad *loraAdapter, inOut bool) {
	a, b, r := ad.a.Value.Data, ad.b.Value.Data, ad.rank
	for o := range ad.out {
		for i := range ad.in {
			var s float64
			for k := range r {
				s += float64(b[o*r+k]) * float64(a[k*ad.in+i])
			}
			idx := o*ad.in + i
			if inOut {
				idx = i*ad.out + o
			}
			w[idx] += float32(float64(ad.scale) * s)
		}
	}
}

// LoadPEFTAdapter attaches the PEFT adapter in dir to layers, a whole model of cfg (its
// base, whose parameters are frozen), and loads the adapter's weights: the layers then
// compute what the fine-tuned model does. Every adapter tensor must be there with its
// shape.
func LoadPEFTAdapter(dir string, cfg Config, layers []Layer) ([]Layer, error) {
	lo, tf, err := ReadPEFTAdapter(dir, cfg.FamilyName())
	if err != nil {
		return nil, err
	}
	out, err := WithLoRA(cfg, layers, lo, 0)
	if err != nil {
		return nil, err
	}
	if err := LoadParams(tf, LayerParams(out)); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return out, nil
}
