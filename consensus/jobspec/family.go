package jobspec

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Family is a model architecture (docs/models.md).
type Family string

// Model families.
const (
	// FamilyGPT is meshnode's byte-level GPT: GPT-2's blocks with an untied head. The
	// default; "" means it too.
	FamilyGPT Family = "gpt"
	// FamilyGPT2 is GPT-2: learned positions, LayerNorm, tanh GELU, the head tied to the
	// token embedding.
	FamilyGPT2 Family = "gpt2"
	// FamilyLlama is Llama: RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention,
	// no biases, the head tied or not.
	FamilyLlama Family = "llama"
)

// Families lists every family, the default first.
func Families() []Family { return []Family{FamilyGPT, FamilyGPT2, FamilyLlama} }

// Valid reports whether f is a known family ("" is the default, gpt).
func (f Family) Valid() bool { return f == "" || slices.Contains(Families(), f) }

// Check returns nil for a known family, else an error naming field and the choices.
func (f Family) Check(field string) error {
	if f == "" {
		return nil
	}
	return check(field, f, Families())
}

// ParseFamily converts s, as field holds it, to a Family.
func ParseFamily(field, s string) (Family, error) { return parse(field, s, Families()) }

// Presets are the named public shapes a model can start from (model.preset, --preset).
var presets = map[string]Model{
	// GPT-2 small and medium (Hugging Face gpt2, gpt2-medium).
	"gpt2-124m": {Family: FamilyGPT2, Layers: 12, DModel: 768, Heads: 12, Context: 1024, Vocab: 50257},
	"gpt2-355m": {Family: FamilyGPT2, Layers: 24, DModel: 1024, Heads: 16, Context: 1024, Vocab: 50257},
	// HuggingFaceTB/SmolLM-135M's shape.
	"smollm-135m": {Family: FamilyLlama, Layers: 30, DModel: 576, Heads: 9, KVHeads: 3, Intermediate: 1536,
		Context: 2048, Vocab: 49152, RopeTheta: 10000, NormEps: 1e-5, Tied: true},
	// TinyLlama/TinyLlama-1.1B's shape.
	"tinyllama-1.1b": {Family: FamilyLlama, Layers: 22, DModel: 2048, Heads: 32, KVHeads: 4, Intermediate: 5632,
		Context: 2048, Vocab: 32000, RopeTheta: 10000, NormEps: 1e-5},
}

// PresetNames lists the presets, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// PresetModel returns the shape named name (its Preset field set), or an error naming
// field and the presets there are.
func PresetModel(field, name string) (Model, error) {
	m, ok := presets[name]
	if !ok {
		return Model{}, fmt.Errorf("%s: unknown preset %q (known: %s)", field, name, strings.Join(PresetNames(), ", "))
	}
	m.Preset = name
	return m, nil
}

// FamilyName is the model's family, FamilyGPT for "".
func (m Model) FamilyName() Family {
	if m.Family == "" {
		return FamilyGPT
	}
	return m.Family
}

// KVHeadCount is the number of key/value heads: KVHeads, or Heads when it is 0.
func (m Model) KVHeadCount() int {
	if m.KVHeads == 0 {
		return m.Heads
	}
	return m.KVHeads
}

// Hidden is the MLP's hidden width: Intermediate, or 4·DModel when it is 0.
func (m Model) Hidden() int {
	if m.Intermediate == 0 {
		return 4 * m.DModel
	}
	return m.Intermediate
}

// Theta is the rotary base: RopeTheta, or 10000 when it is 0.
func (m Model) Theta() float64 {
	if m.RopeTheta == 0 {
		return 10000
	}
	return m.RopeTheta
}

// Eps is the normalisations' epsilon: NormEps, or 1e-5 when it is 0.
func (m Model) Eps() float64 {
	if m.NormEps == 0 {
		return 1e-5
	}
	return m.NormEps
}

// TiedHead reports whether the output head is the token embedding: always for gpt2,
// never for gpt, as Tied says for llama.
func (m Model) TiedHead() bool {
	switch m.FamilyName() {
	case FamilyGPT2:
		return true
	case FamilyLlama:
		return m.Tied
	}
	return false
}

// ParamCount is the number of trained parameters (a tied head counted once).
func (m Model) ParamCount() float64 {
	d, l, ctx, vocab := float64(m.DModel), float64(m.Layers), float64(m.Context), float64(m.Vocab)
	hid, kv := float64(m.Hidden()), float64(m.KVHeadCount())*d/float64(max(m.Heads, 1))
	head := vocab * d
	if m.TiedHead() {
		head = 0
	}
	if m.FamilyName() == FamilyLlama {
		// Embedding; per block q and o (2d²), k and v (2·d·kv), the SwiGLU MLP (3·d·hid)
		// and two RMSNorms (2d); the final RMSNorm (d).
		return vocab*d + head + l*(2*d*d+2*d*kv+3*d*hid+2*d) + d
	}
	// Token and position embeddings, the head, and per block: attention (4d² + 4d), MLP
	// (2·d·hid + hid + d) and two layer norms (4d); the final layer norm (2d).
	return vocab*d + ctx*d + head + l*(4*d*d+4*d+2*d*hid+hid+d+4*d) + 2*d
}

// maxIntermediate bounds model.intermediate.
const maxIntermediate = 4 * MaxDModel

func (m Model) validateFamily(v *validator) {
	if err := m.Family.Check("model.family"); err != nil {
		v.errs = append(v.errs, err)
		return
	}
	if m.Preset != "" {
		if _, err := PresetModel("model.preset", m.Preset); err != nil {
			v.errs = append(v.errs, err)
		}
	}
	fam := m.FamilyName()
	v.between("model.intermediate", m.Intermediate, 0, maxIntermediate)
	if !(m.NormEps >= 0 && m.NormEps < 1) {
		v.addf("model.norm_eps", "must be ≥ 0 and < 1 (0 means 1e-5), got %v", m.NormEps)
	}
	if fam == FamilyGPT {
		if m.Tied {
			v.addf("model.tied", "the gpt family's head is untied; family gpt2 ties it")
		}
		if m.NormEps != 0 {
			v.addf("model.norm_eps", "the gpt family's LayerNorm uses 1e-5; set it with family gpt2 or llama")
		}
	}
	if fam != FamilyLlama {
		if m.KVHeads != 0 {
			v.addf("model.kv_heads", "only the llama family has grouped-query attention, got %d with family %s", m.KVHeads, fam)
		}
		if m.RopeTheta != 0 {
			v.addf("model.rope_theta", "only the llama family has rotary positions, got %v with family %s", m.RopeTheta, fam)
		}
		return
	}
	if !(m.RopeTheta >= 0 && m.RopeTheta <= 1e12) {
		v.addf("model.rope_theta", "must be ≥ 0 and ≤ 1e12 (0 means 10000), got %v", m.RopeTheta)
	}
	v.between("model.kv_heads", m.KVHeads, 0, MaxHeads)
	if m.KVHeads >= 1 && m.Heads >= 1 && m.Heads%m.KVHeads != 0 {
		v.addf("model.kv_heads", "must divide model.heads (%d), got %d", m.Heads, m.KVHeads)
	}
	if m.DModel >= 1 && m.Heads >= 1 && m.DModel%m.Heads == 0 && (m.DModel/m.Heads)%2 != 0 {
		v.addf("model.heads", "must leave an even head width (model.d_model/model.heads) for rotary positions, got %d/%d", m.DModel, m.Heads)
	}
}

// MarshalJSON writes a model as its fields' tags say, except that a model with a preset
// writes every family field, zero or not: Parse applies a preset under the fields the
// document holds, so a zero written beside a preset (tied: false over a tied preset) must
// stay in the document for the spec to parse back to itself (the CLI parses a spec and
// the node parses the JSON it sends again).
func (m Model) MarshalJSON() ([]byte, error) {
	type plain Model
	if m.Preset == "" {
		return json.Marshal(plain(m))
	}
	return json.Marshal(struct {
		Layers       int     `json:"layers"`
		DModel       int     `json:"d_model"`
		Heads        int     `json:"heads"`
		Context      int     `json:"context"`
		Vocab        int     `json:"vocab"`
		Family       Family  `json:"family"`
		Preset       string  `json:"preset"`
		KVHeads      int     `json:"kv_heads"`
		Intermediate int     `json:"intermediate"`
		RopeTheta    float64 `json:"rope_theta"`
		Tied         bool    `json:"tied"`
		NormEps      float64 `json:"norm_eps"`
		Init         string  `json:"init,omitempty"`
		InitBlob     string  `json:"init_blob,omitempty"`
	}(m))
}
