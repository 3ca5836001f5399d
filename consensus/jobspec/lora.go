package jobspec

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// MaxLoRARank bounds train.lora.rank.
const MaxLoRARank = 4096

// LoRA is train.lora: low-rank adapters on the blocks' linear layers (Hu et al. 2021, as
// Hugging Face PEFT builds them). The base weights are frozen; only the adapters train,
// synchronise and are checkpointed. docs/lora.md.
type LoRA struct {
	// Rank is r, the adapters' inner width (1…MaxLoRARank).
	Rank int `json:"rank" yaml:"rank"`
	// Alpha scales the adapters' product by Alpha/Rank. 0 means Rank (a scale of 1).
	Alpha float64 `json:"alpha,omitempty" yaml:"alpha"`
	// Targets names the linear layers that get adapters: llama's q, k, v, o, gate, up,
	// down (or q_proj … down_proj); gpt and gpt2's qkv (c_attn), o (attn.c_proj), up
	// (c_fc), down (mlp.c_proj); and for both "attn" (every attention projection) and
	// "mlp" (every MLP projection). Empty means ["attn"].
	Targets []string `json:"targets,omitempty" yaml:"targets"`
}

// Scale is Alpha/Rank, the factor of the adapters' product (Alpha 0: 1).
func (l LoRA) Scale() float64 {
	if l.Alpha == 0 || l.Rank == 0 {
		return 1
	}
	return l.Alpha / float64(l.Rank)
}

// LoRA modules of each family, in block order: the canonical target names.
var (
	llamaLoRAModules = []string{"q", "k", "v", "o", "gate", "up", "down"}
	gptLoRAModules   = []string{"qkv", "o", "up", "down"}
)

// loraAliases maps the other accepted spellings to a canonical module, per family.
var loraAliases = map[Family]map[string]string{
	FamilyLlama: {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o",
		"gate_proj": "gate", "up_proj": "up", "down_proj": "down"},
	FamilyGPT: {"c_attn": "qkv", "attn.c_proj": "o", "c_fc": "up", "mlp.c_proj": "down"},
}

// LoRAModules lists the canonical modules family can adapt, in block order.
func LoRAModules(f Family) []string {
	if f == FamilyLlama {
		return llamaLoRAModules
	}
	return gptLoRAModules
}

// Modules resolves Targets for family into canonical module names, in block order,
// without duplicates. The error names field (e.g. "train.lora.targets") and the names
// there are.
func (l LoRA) Modules(field string, f Family) ([]string, error) {
	all := LoRAModules(f)
	aliases := loraAliases[FamilyGPT]
	attn, mlp := []string{"qkv", "o"}, []string{"up", "down"}
	if f == FamilyLlama {
		aliases, attn, mlp = loraAliases[FamilyLlama], []string{"q", "k", "v", "o"}, []string{"gate", "up", "down"}
	}
	targets := l.Targets
	if len(targets) == 0 {
		targets = []string{"attn"}
	}
	want := map[string]bool{}
	for _, t := range targets {
		switch name := strings.TrimSpace(t); {
		case name == "attn":
			addAll(want, attn)
		case name == "mlp":
			addAll(want, mlp)
		case slices.Contains(all, name):
			want[name] = true
		case aliases[name] != "":
			want[aliases[name]] = true
		case f != FamilyLlama && (name == "q" || name == "k" || name == "v"):
			return nil, fmt.Errorf("%s: the %s family fuses q, k and v into one c_attn: target \"qkv\", got %q", field, familyOrDefault(f), t)
		default:
			return nil, fmt.Errorf("%s: unknown target %q for the %s family (known: %s, attn, mlp)", field, t, familyOrDefault(f), strings.Join(all, ", "))
		}
	}
	var out []string
	for _, m := range all {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

func addAll(set map[string]bool, names []string) {
	for _, n := range names {
		set[n] = true
	}
}

func familyOrDefault(f Family) Family {
	if f == "" {
		return FamilyGPT
	}
	return f
}

// Check reports the first unusable field of l, named under prefix (e.g. "train.lora"),
// for a model of family f.
func (l LoRA) Check(prefix string, f Family) error {
	switch {
	case l.Rank < 1:
		return fmt.Errorf("%s.rank: must be ≥ 1, got %d", prefix, l.Rank)
	case l.Rank > MaxLoRARank:
		return fmt.Errorf("%s.rank: must be ≤ %d, got %d", prefix, MaxLoRARank, l.Rank)
	case l.Alpha < 0 || math.IsNaN(l.Alpha) || math.IsInf(l.Alpha, 0):
		return fmt.Errorf("%s.alpha: must be a finite number ≥ 0 (0: the rank), got %v", prefix, l.Alpha)
	case len(l.Targets) > 32:
		return fmt.Errorf("%s.targets: at most 32 names, got %d", prefix, len(l.Targets))
	}
	_, err := l.Modules(prefix+".targets", f)
	return err
}
