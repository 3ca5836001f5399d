package jobspec

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestPresetFillsTheShapeAndFieldsOverrideIt(t *testing.T) {
	s, err := Parse([]byte("model:\n  preset: smollm-135m\n  layers: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := presets["smollm-135m"]
	want.Preset, want.Layers = "smollm-135m", 2
	if s.Model != want {
		t.Fatalf("model = %+v, want %+v", s.Model, want)
	}
	if s.Model.KVHeadCount() != 3 || s.Model.Hidden() != 1536 || !s.Model.TiedHead() {
		t.Fatalf("resolved shape wrong: %+v", s.Model)
	}
}

func TestEveryPresetIsValid(t *testing.T) {
	for _, n := range PresetNames() {
		s, err := Parse([]byte("model:\n  preset: " + n + "\n"))
		if err != nil {
			t.Errorf("%s: %v", n, err)
		}
		if s.Model.Preset != n {
			t.Errorf("%s: preset recorded as %q", n, s.Model.Preset)
		}
	}
}

// The default model's JSON has none of the family fields, so stored jobs keep their bytes.
func TestDefaultModelJSONUnchanged(t *testing.T) {
	b, err := json.Marshal(DefaultModel())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"layers":4,"d_model":128,"heads":4,"context":128,"vocab":256}`; got != want {
		t.Fatalf("json = %s, want %s", got, want)
	}
}

func TestFamilyValidationNamesTheField(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"family: mamba", `model.family: must be one of gpt, gpt2, llama, got "mamba"`},
		{"preset: gpt5", `model.preset: unknown preset "gpt5"`},
		{"family: gpt2\n  kv_heads: 2", "model.kv_heads: only the llama family"},
		{"family: llama\n  kv_heads: 3", "model.kv_heads: must divide model.heads (4), got 3"},
		{"family: llama\n  d_model: 12\n  heads: 4", "model.heads: must leave an even head width"},
		{"tied: true", "model.tied: the gpt family's head is untied"},
		{"family: gpt\n  rope_theta: 500000", "model.rope_theta: only the llama family"},
		{"family: llama\n  norm_eps: -1", "model.norm_eps: must be ≥ 0"},
		{"intermediate: -1", "model.intermediate: must be ≥ 0"},
		{"family: llama\n  tied: true\nmemory:\n  offload: \"on\"", "memory.offload: a tied llama model cannot be offloaded"},
	} {
		_, err := Parse([]byte("model:\n  " + c.yaml + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to say %q", c.yaml, err, c.want)
		}
	}
}

func TestParamCountOfPresets(t *testing.T) {
	// The public parameter counts of the shapes (a tied head counted once).
	for name, want := range map[string]float64{"gpt2-124m": 124.44e6, "gpt2-355m": 354.82e6, "smollm-135m": 134.5e6, "tinyllama-1.1b": 1100.05e6} {
		m, _ := PresetModel("p", name)
		if got := m.ParamCount(); got < want*0.995 || got > want*1.005 {
			t.Errorf("%s: %.2fM parameters, want about %.2fM", name, got/1e6, want/1e6)
		}
	}
}

// A spec with a preset and fields set to zero beside it parses back to itself from its
// JSON, as the node parses what the CLI sends; without a preset the zero fields stay out
// of the JSON.
func TestPresetSpecRoundTripsThroughJSON(t *testing.T) {
	s, err := Parse([]byte("model:\n  preset: smollm-135m\n  tied: false\n  intermediate: 0\n  layers: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Model.Tied || s.Model.Intermediate != 0 {
		t.Fatalf("the fields written beside the preset did not override it: %+v", s.Model)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Model != s.Model {
		t.Fatalf("round trip changed the model: %+v, was %+v\n%s", again.Model, s.Model, b)
	}
	plain, _ := json.Marshal(Model{Layers: 1, DModel: 8, Heads: 2, Context: 4, Vocab: 9, Family: FamilyLlama})
	if strings.Contains(string(plain), "tied") {
		t.Fatalf("zero fields written without a preset: %s", plain)
	}
}
