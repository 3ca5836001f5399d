package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/tokenizer"
)

// hfRecipe is smallTrain's recipe without its model flags (--init gives the model).
func hfRecipe(data string, extra ...string) []string {
	return append([]string{"train", "--data", data, "--batch", "4", "--micro-batches", "2", "--steps", "12", "--warmup", "3",
		"--lr", "3e-3", "--eval-every", "4", "--eval-windows", "8", "-o", "json"}, extra...)
}

// TestTrainFromAnExportedHuggingFaceDirectory: a run's step-0 weights exported as a Hugging
// Face directory and trained with train --init give the run's losses bit for bit (the
// import is exact and starts the optimizer as a fresh run does), for GPT-2 and Llama; the
// last step's export starts from the trained weights; generate reads the directory as it
// reads the checkpoint.
func TestTrainFromAnExportedHuggingFaceDirectory(t *testing.T) {
	data := corpus(t)
	for _, fam := range [][]string{{"--family", "gpt2"}, {"--family", "llama", "--kv-heads", "1", "--intermediate", "48"}} {
		dir := t.TempDir()
		ck, hf := filepath.Join(dir, "ck"), filepath.Join(dir, "hf")
		code, out, errs := runCLI(t, smallTrain(data, append(fam, "--out", ck)...)...)
		if code != 0 {
			t.Fatalf("%v: %s", fam, errs)
		}
		want, _ := parseTrain(t, out)
		step0 := filepath.Join(ck, "step-0")
		if code, _, errs := runCLI(t, "export", "--checkpoint", step0, "--out", hf); code != 0 {
			t.Fatalf("%v: export: %s", fam, errs)
		}
		code, out, errs = runCLI(t, hfRecipe(data, "--init", hf)...)
		if code != 0 {
			t.Fatalf("%v: train --init: %s", fam, errs)
		}
		got, _ := parseTrain(t, out)
		for s := 1; s <= 12; s++ {
			if *got[s].TrainLoss != *want[s].TrainLoss {
				t.Fatalf("%v: step %d loss %v from the Hugging Face directory, %v from the run's own start", fam, s, *got[s].TrainLoss, *want[s].TrainLoss)
			}
		}
		// The same recipe from the trained weights starts where the run ended, not where
		// it began: --init is not silently the seed's initialisation.
		final := filepath.Join(dir, "hf-final")
		if code, _, errs := runCLI(t, "export", "--checkpoint", ck, "--out", final); code != 0 {
			t.Fatalf("%v: export: %s", fam, errs)
		}
		if code, out, errs = runCLI(t, hfRecipe(data, "--init", final)...); code != 0 {
			t.Fatalf("%v: train --init: %s", fam, errs)
		}
		trained, _ := parseTrain(t, out)
		if !(*trained[1].TrainLoss < *want[1].TrainLoss-0.1) {
			t.Fatalf("%v: first loss %v from the trained weights, %v from the initial ones", fam, *trained[1].TrainLoss, *want[1].TrainLoss)
		}
		// LoRA on the Hugging Face directory as its frozen base: B starts at zero, so the
		// first loss is the base's.
		code, out, errs = runCLI(t, hfRecipe(data, "--init", final, "--lora-rank", "4", "--lora-targets", "attn")...)
		if code != 0 {
			t.Fatalf("%v: train --init --lora-rank: %s", fam, errs)
		}
		if lora, _ := parseTrain(t, out); *lora[1].TrainLoss != *trained[1].TrainLoss {
			t.Fatalf("%v: LoRA's first loss %v on the Hugging Face base, the base's %v", fam, *lora[1].TrainLoss, *trained[1].TrainLoss)
		}
		gen := []string{"generate", "--tokens", "12", "--temperature", "0", "--prompt", "func "}
		_, a, errs := runCLI(t, append(gen, "--checkpoint", step0)...)
		code, b, errs2 := runCLI(t, append(gen, "--checkpoint", hf)...)
		if code != 0 || a != b || a == "" {
			t.Fatalf("%v: generate from the checkpoint %q (%s), from the Hugging Face directory %q (exit %d: %s)", fam, a, errs, b, code, errs2)
		}
	}
}

// TestTrainInitRefusesBadInput: a bad --init, or one combined with flags that would change
// its model, exits 2 with one line that says what is wrong, writing nothing.
func TestTrainInitRefusesBadInput(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	hf := filepath.Join(dir, "hf")
	ck := filepath.Join(dir, "ck")
	if code, _, errs := runCLI(t, smallTrain(data, "--family", "gpt2", "--steps", "1", "--out", ck)...); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := runCLI(t, "export", "--checkpoint", ck, "--out", hf); code != 0 {
		t.Fatal(errs)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.MkdirAll(bad, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bad, "config.json"), []byte(`{"model_type": "mamba"}`), 0o644)
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no directory", hfRecipe(data, "--out", out, "--init", filepath.Join(dir, "nope")), "nope: no such file or directory"},
		{"unknown model_type", hfRecipe(data, "--out", out, "--init", bad), filepath.Join(bad, "config.json") + `: model_type: "mamba" is not a family`},
		{"model flag", hfRecipe(data, "--out", out, "--init", hf, "--layers", "3"), "--layers conflicts with --init"},
		{"gpt2 context", hfRecipe(data, "--out", out, "--init", hf, "--context", "16"), "--context conflicts with --init"},
		{"tokenizer", hfRecipe(data, "--out", out, "--init", hf, "--tokenizer", "x.json"), "--init conflicts with --tokenizer"},
		{"replicas", hfRecipe(data, "--init", hf, "--replicas", "2"), "--init works with single-process training only"},
		{"generate", []string{"generate", "--checkpoint", bad}, `model_type: "mamba" is not a family`},
		{"export", []string{"export", "--checkpoint", bad, "--out", out}, `model_type: "mamba" is not a family`},
	} {
		code, stdout, stderr := runCLI(t, c.args...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, error %q; want exit 2 and one line saying %q", c.name, code, stderr, c.want)
		}
		if stdout != "" {
			t.Errorf("%s: printed %q before failing", c.name, stdout)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: wrote %s", c.name, out)
		}
	}
}

// TestGenerateFromAHuggingFaceDirectory: generate reads a Hugging Face directory with its
// tokenizer.json (the prompt encoded with it), and one without a tokenizer as bytes even
// when its vocabulary is padded past 256 (only byte ids are sampled).
func TestGenerateFromAHuggingFaceDirectory(t *testing.T) {
	tok, err := os.ReadFile("../../tokenizer/testdata/gpt2-style-2048.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		cfg          model.Config
		tok          []byte
		promptTokens int
	}{
		{"tokenizer", model.Config{Family: jobspec.FamilyGPT2, Layers: 1, DModel: 16, Heads: 2, Context: 16, Vocab: 2048}, tok, 0},
		{"bytes, padded vocabulary", model.Config{Family: jobspec.FamilyLlama, Layers: 1, DModel: 16, Heads: 2, Context: 16, Vocab: 300}, nil, len("func main() {")},
	} {
		dir := filepath.Join(t.TempDir(), "hf")
		g := model.New(c.cfg, 2)
		if err := model.WriteHF(dir, model.HFExport{Config: c.cfg, Weights: model.ParamTensors(g.Params()), Tokenizer: c.tok}); err != nil {
			t.Fatal(err)
		}
		want := c.promptTokens
		if c.tok != nil {
			tk, err := tokenizer.Parse(c.tok, "t")
			if err != nil {
				t.Fatal(err)
			}
			want = len(tk.Encode([]byte("func main() {")))
		}
		code, out, errs := runCLI(t, "generate", "--checkpoint", dir, "--prompt", "func main() {", "--tokens", "20", "-o", "json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", c.name, code, errs)
		}
		var res struct {
			Text            string `json:"text"`
			PromptTokens    int    `json:"prompt_tokens"`
			GeneratedTokens int    `json:"generated_tokens"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.PromptTokens != want || res.GeneratedTokens != 20 || !strings.HasPrefix(res.Text, "func main() {") {
			t.Fatalf("%s: %q (%v); want %d prompt tokens and 20 more", c.name, out, err, want)
		}
	}
}
