package main

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

// transformersCheck loads a Hugging Face directory with transformers'
// AutoModelForCausalLM (on the GPU when there is one, TF32 off) and AutoTokenizer, and
// prints the logits of argv[2]'s ids and the tokenizer's ids of argv[3].
const transformersCheck = `
import json, os, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda" if torch.cuda.is_available() else "cpu"
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).to(dev).eval()
ids = torch.tensor([json.loads(sys.argv[2])], device=dev)
with torch.no_grad():
    logits = m(ids).logits[0].float().cpu().reshape(-1).tolist()
out = {"logits": logits, "device": dev}
if os.path.exists(os.path.join(sys.argv[1], "tokenizer.json")):
    out["ids"] = AutoTokenizer.from_pretrained(sys.argv[1])(sys.argv[3], add_special_tokens=False)["input_ids"]
print(json.dumps(out))
`

// transformersPython is $MESHNODE_TRANSFORMERS_PYTHON (default /usr/bin/python3) when it
// imports transformers; "" otherwise, and then a failure where
// $MESHNODE_REQUIRE_TRANSFORMERS is set (scripts/hf-transformers-check.sh sets it).
func transformersPython(t *testing.T) string {
	p := os.Getenv("MESHNODE_TRANSFORMERS_PYTHON")
	if p == "" {
		p = "/usr/bin/python3"
	}
	if exec.Command(p, "-c", "import transformers, torch").Run() != nil {
		if os.Getenv("MESHNODE_REQUIRE_TRANSFORMERS") != "" {
			t.Fatalf("%s cannot import transformers and torch (set MESHNODE_TRANSFORMERS_PYTHON)", p)
		}
		return ""
	}
	return p
}

// TestHFExportLoadsInTransformers: Hugging Face transformers' AutoModelForCausalLM loads
// meshnode's export of each family (GPT-2 tied, gpt untied, Llama with grouped-query
// attention, tied and untied) and computes meshnode's logits within 1e-4, and AutoTokenizer
// reads the exported tokenizer files to meshnode's ids. It needs transformers, which this
// repository's CI does not install: scripts/hf-transformers-check.sh runs it where it is.
func TestHFExportLoadsInTransformers(t *testing.T) {
	python := transformersPython(t)
	if python == "" {
		t.Skip("no Python with transformers (set MESHNODE_TRANSFORMERS_PYTHON; scripts/hf-transformers-check.sh)")
	}
	gpt2Tok, _ := os.ReadFile("../../tokenizer/testdata/gpt2-style-2048.json")
	llamaTok, _ := os.ReadFile("../../tokenizer/testdata/llama3-style-2048.json")
	text := "func (n *Node) Join(ctx context.Context) error {"
	for _, c := range []struct {
		name string
		cfg  model.Config
		tok  []byte
	}{
		{"gpt2", model.Config{Family: jobspec.FamilyGPT2, Layers: 2, DModel: 32, Heads: 4, Context: 32, Vocab: 2048}, gpt2Tok},
		{"gpt", model.Config{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}, nil},
		{"llama-gqa", model.Config{Family: jobspec.FamilyLlama, Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Intermediate: 64, Context: 32, Vocab: 2048, RopeTheta: 500000}, llamaTok},
		{"llama-tied", model.Config{Family: jobspec.FamilyLlama, Layers: 2, DModel: 32, Heads: 4, KVHeads: 1, Intermediate: 48, Context: 32, Vocab: 256, Tied: true, NormEps: 1e-6}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := model.New(c.cfg, 3)
			dir := filepath.Join(t.TempDir(), c.name)
			if err := model.WriteHF(dir, model.HFExport{Config: c.cfg, Weights: model.ParamTensors(g.Params()), Tokenizer: c.tok}); err != nil {
				t.Fatal(err)
			}
			var ids []int32
			if c.tok != nil {
				tok, err := tokenizer.Parse(c.tok, c.name)
				if err != nil {
					t.Fatal(err)
				}
				for _, id := range tok.Encode([]byte(text)) {
					ids = append(ids, int32(id))
				}
			} else {
				for _, b := range []byte(text) {
					ids = append(ids, int32(b))
				}
			}
			ids = ids[:min(len(ids), c.cfg.Context)]
			want, err := model.Logits(g, ids)
			if err != nil {
				t.Fatal(err)
			}
			idsJSON, _ := json.Marshal(ids)
			out, err := exec.Command(python, "-c", transformersCheck, dir, string(idsJSON), text).Output()
			if err != nil {
				t.Fatalf("transformers: %v\n%s", err, out)
			}
			var got struct {
				Logits []float64 `json:"logits"`
				IDs    []int32   `json:"ids"`
				Device string    `json:"device"`
			}
			if err := json.Unmarshal(out, &got); err != nil {
				t.Fatalf("transformers' output: %v", err)
			}
			if len(got.Logits) != len(want) {
				t.Fatalf("%d logits from transformers, meshnode %d", len(got.Logits), len(want))
			}
			var worst float64
			for i, w := range want {
				d := math.Abs(got.Logits[i] - float64(w))
				if !(d <= 1e-4) {
					t.Fatalf("logit %d: transformers %.6f, meshnode %.6f", i, got.Logits[i], w)
				}
				worst = max(worst, d)
			}
			if c.tok != nil && string(mustMarshal(got.IDs)) != string(idsJSON) {
				t.Fatalf("AutoTokenizer gives %v, meshnode %v", got.IDs, ids)
			}
			t.Logf("%d logits on %s: largest |Δ| %.2g", len(want), got.Device, worst)
		})
	}
}

func mustMarshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
