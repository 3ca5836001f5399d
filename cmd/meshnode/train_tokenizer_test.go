package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tokenizedCorpus writes a directory of text files, a .jsonl of the same text and a
// tokenizer of vocabulary 300 learned from it.
func tokenizedCorpus(t *testing.T) (dir, jsonl, tok string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "docs")
	text, err := os.ReadFile(corpus(t))
	if err != nil {
		t.Fatal(err)
	}
	var lines strings.Builder
	for i, chunk := range strings.SplitAfter(string(text), "}\n") {
		if chunk == "" {
			continue
		}
		p := filepath.Join(dir, string(rune('a'+i%5)), "f"+strings.Repeat("0", i%3)+".txt")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(chunk)
		f.Close()
		b, _ := json.Marshal(map[string]string{"body": chunk})
		lines.Write(append(b, '\n'))
	}
	jsonl = filepath.Join(root, "docs.jsonl")
	if err := os.WriteFile(jsonl, []byte(lines.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tok = filepath.Join(root, "tokenizer.json")
	if code, _, errs := runCLI(t, "tokenizer", "train", "--vocab", "300", "--out", tok, dir); code != 0 {
		t.Fatalf("tokenizer train: exit %d: %s", code, errs)
	}
	return dir, jsonl, tok
}

func TestTrainWithTokenizerThenGenerate(t *testing.T) {
	dir, jsonl, tok := tokenizedCorpus(t)
	out := filepath.Join(t.TempDir(), "ckpt")
	code, stdout, errs := runCLI(t, smallTrain(dir, "--tokenizer", tok, "--family", "llama", "--out", out)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errs)
	}
	steps, _ := parseTrain(t, stdout)
	if first, last := steps[1].TrainLoss, steps[12].TrainLoss; first == nil || last == nil || *last >= *first {
		t.Fatalf("loss did not fall: %v → %v", first, last)
	}
	if _, err := os.Stat(filepath.Join(out, TokenizerFile)); err != nil {
		t.Fatalf("--out has no tokenizer: %v", err)
	}
	// generate finds the tokenizer in the checkpoint's directory and speaks its vocabulary.
	code, stdout, errs = runCLI(t, "generate", "--checkpoint", out, "--prompt", "func f() {", "--tokens", "20", "--top-p", "0.9", "-o", "json")
	if code != 0 {
		t.Fatalf("generate: exit %d: %s", code, errs)
	}
	var g struct {
		Text      string `json:"text"`
		Generated int    `json:"generated_tokens"`
	}
	if err := json.Unmarshal([]byte(stdout), &g); err != nil || g.Generated != 20 || !strings.HasPrefix(g.Text, "func f() {") {
		t.Fatalf("generate: %q (%v)", stdout, err)
	}
	// The .jsonl with its text in "body" trains too.
	if code, _, errs := runCLI(t, smallTrain(jsonl, "--tokenizer", tok, "--text-field", "body", "--steps", "2", "--warmup", "1")...); code != 0 {
		t.Fatalf("train on jsonl: exit %d: %s", code, errs)
	}
}

func TestTrainTokenizerBadInput(t *testing.T) {
	dir, jsonl, tok := tokenizedCorpus(t)
	broken := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(broken, []byte(`{"model":{"type":"BPE","vocab":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{smallTrain(dir, "--tokenizer", tok, "--vocab", "256"), "--vocab 256 does not match --tokenizer"},
		{smallTrain(dir, "--tokenizer", broken), broken},
		{smallTrain(jsonl, "--tokenizer", tok), `docs.jsonl:1: no "text" field`},
		{smallTrain("builtin:gostd", "--tokenizer", tok), "builtin:gostd is byte-level"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(errs, c.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line containing %q", c.args[2:5], code, errs, c.want)
		}
	}
	// A model past 256 tokens without a tokenizer cannot take a text prompt.
	out := filepath.Join(t.TempDir(), "ckpt")
	if code, _, errs := runCLI(t, smallTrain(dir, "--tokenizer", tok, "--steps", "1", "--warmup", "0", "--out", out)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, errs)
	}
	if err := os.Remove(filepath.Join(out, TokenizerFile)); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "generate", "--checkpoint", out, "--prompt", "x")
	if code != 2 || !strings.Contains(errs, "give --tokenizer") {
		t.Errorf("generate without a tokenizer: exit %d, %q", code, errs)
	}
}

// TestResumeKeepsTheTokenizer: --resume without --tokenizer encodes with the one the run
// left in --out, so the resumed losses are those of a run that never stopped.
func TestResumeKeepsTheTokenizer(t *testing.T) {
	dir, _, tok := tokenizedCorpus(t)
	_, whole, _ := runCLI(t, smallTrain(dir, "--tokenizer", tok)...)
	out := filepath.Join(t.TempDir(), "ckpt")
	if code, _, errs := runCLI(t, smallTrain(dir, "--tokenizer", tok, "--out", out, "--stop-at", "6")...); code != 0 {
		t.Fatalf("first half: exit %d: %s", code, errs)
	}
	code, resumed, errs := runCLI(t, "train", "--resume", out, "-o", "json")
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	a, _ := parseTrain(t, whole)
	b, _ := parseTrain(t, resumed)
	if a[12].TrainLoss == nil || b[12].TrainLoss == nil || *a[12].TrainLoss != *b[12].TrainLoss {
		t.Fatalf("step 12 loss: whole run %v, resumed %v", a[12].TrainLoss, b[12].TrainLoss)
	}
}

// TestShardThenTrain: tokenizer shard writes a sharded corpus that train streams, and a
// run on it learns.
func TestShardThenTrain(t *testing.T) {
	_, jsonl, tok := tokenizedCorpus(t)
	shards := filepath.Join(t.TempDir(), "shards")
	if code, _, errs := runCLI(t, "tokenizer", "shard", "--tokenizer", tok, "--out", shards, "--shard-tokens", "1000", "--text-field", "body", jsonl); code != 0 {
		t.Fatalf("shard: exit %d: %s", code, errs)
	}
	code, stdout, errs := runCLI(t, smallTrain(shards, "--tokenizer", filepath.Join(shards, TokenizerFile))...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, errs)
	}
	steps, _ := parseTrain(t, stdout)
	if first, last := steps[1].TrainLoss, steps[12].TrainLoss; first == nil || last == nil || *last >= *first {
		t.Fatalf("loss did not fall: %v → %v", first, last)
	}
}
