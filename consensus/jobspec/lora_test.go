package jobspec

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestLoRAParsesAndResolvesTargets(t *testing.T) {
	s, err := Parse([]byte("model: {family: llama, layers: 2, d_model: 64, heads: 4}\ntrain: {lora: {rank: 8, alpha: 16, targets: [q_proj, v, mlp]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Train.LoRA == nil || s.Train.LoRA.Rank != 8 || s.Train.LoRA.Scale() != 2 {
		t.Fatalf("train.lora = %+v, want rank 8 scale 2", s.Train.LoRA)
	}
	mods, err := s.Train.LoRA.Modules("train.lora.targets", s.Model.FamilyName())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"q", "v", "gate", "up", "down"}; !reflect.DeepEqual(mods, want) {
		t.Fatalf("modules %v, want %v", mods, want)
	}
	gpt, err := LoRA{Rank: 4}.Modules("t", FamilyGPT2)
	if err != nil || !reflect.DeepEqual(gpt, []string{"qkv", "o"}) {
		t.Fatalf("gpt2 default targets %v (%v), want [qkv o]", gpt, err)
	}
	// A spec without lora encodes as it did before the field existed.
	b, _ := json.Marshal(DefaultSpec())
	if strings.Contains(string(b), "lora") {
		t.Fatalf("a spec without lora mentions it: %s", b)
	}
}

func TestLoRABadFieldsAreNamed(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"train: {lora: {rank: 0}}", "train.lora.rank: must be ≥ 1, got 0"},
		{"train: {lora: {rank: 5000}}", "train.lora.rank: must be ≤ 4096"},
		{"train: {lora: {rank: 8, alpha: -1}}", "train.lora.alpha: must be a finite number ≥ 0"},
		{"train: {lora: {rank: 8, targets: [q]}}", `train.lora.targets: the gpt family fuses q, k and v into one c_attn: target "qkv", got "q"`},
		{"model: {family: llama}\ntrain: {lora: {rank: 8, targets: [qkv]}}", `train.lora.targets: unknown target "qkv" for the llama family`},
		{"train: {lora: {rank: 8, dropout: 0.1}}", "train.lora.dropout: unknown field"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.yaml, err, c.want)
		}
	}
}
