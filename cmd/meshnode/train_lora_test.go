package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainLoRAFromTheCommandLine: a Llama base trained with --out is fine-tuned with
// --init and --lora-rank (its validation loss falls below the base's), exported as a PEFT
// adapter and merged into a model generate loads, greedily generating what the LoRA
// checkpoint itself and the base with the adapter (--lora-adapter) generate; bad LoRA flags exit 2 with one line
// naming the flag.
func TestTrainLoRAFromTheCommandLine(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	llama := []string{"--family", "llama", "--kv-heads", "1"}
	base, ft := filepath.Join(dir, "base"), filepath.Join(dir, "ft")
	code, out, errs := runCLI(t, smallTrain(data, append(llama, "--out", base)...)...)
	if code != 0 {
		t.Fatalf("base: exit %d: %s", code, errs)
	}
	_, baseDone := parseTrain(t, out)
	lora := append(llama, "--init", base, "--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "q,v,mlp", "--lr", "2e-2")
	code, out, errs = runCLI(t, smallTrain(data, append(lora, "--out", ft)...)...)
	if code != 0 {
		t.Fatalf("LoRA: exit %d: %s", code, errs)
	}
	if _, done := parseTrain(t, out); !(*done.ValLoss < *baseDone.ValLoss) {
		t.Fatalf("LoRA fine-tune ends at validation loss %v, its base at %v", *done.ValLoss, *baseDone.ValLoss)
	}
	adapter, merged := filepath.Join(dir, "adapter"), filepath.Join(dir, "merged")
	if code, _, errs := runCLI(t, "lora-export", ft, "--out", adapter); code != 0 {
		t.Fatalf("lora-export: %s", errs)
	}
	for _, f := range []string{"adapter_config.json", "adapter_model.safetensors"} {
		if _, err := os.Stat(filepath.Join(adapter, f)); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errs := runCLI(t, "lora-export", ft, "--merge", "--out", merged); code != 0 {
		t.Fatalf("lora-export --merge: %s", errs)
	}
	args := []string{"--tokens", "8", "--temperature", "0", "-o", "json"}
	code, fromMerged, errs := runCLI(t, append([]string{"generate", "--checkpoint", filepath.Join(merged, "model.safetensors")}, args...)...)
	if code != 0 || fromMerged == "" {
		t.Fatalf("generate from the merged model: exit %d %s", code, errs)
	}
	code, fromCheckpoint, errs := runCLI(t, append([]string{"generate", "--checkpoint", ft}, args...)...)
	if code != 0 || fromCheckpoint != fromMerged {
		t.Fatalf("generate from the LoRA checkpoint: exit %d %s: %q, from the merged model %q", code, errs, fromCheckpoint, fromMerged)
	}
	code, fromAdapter, errs := runCLI(t, append([]string{"generate", "--checkpoint", base, "--lora-adapter", adapter}, args...)...)
	if code != 0 || fromAdapter != fromMerged {
		t.Fatalf("generate from the base with the PEFT adapter: exit %d %s: %q, from the merged model %q", code, errs, fromAdapter, fromMerged)
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"rank 0", smallTrain(data, "--lora-rank", "0"), "--lora-rank must be between 1 and 4096 (got 0)"},
		{"llama has no qkv", smallTrain(data, append(llama, "--lora-rank", "4", "--lora-targets", "qkv")...), `--lora-targets: unknown target "qkv" for the llama family`},
		{"alpha without rank", smallTrain(data, "--lora-alpha", "4"), "--lora-alpha and --lora-targets need --lora-rank"},
		{"resume with lora flags", []string{"train", "--resume", ft, "--lora-rank", "8"}, "--lora-rank conflicts with --resume"},
		{"init of another shape", smallTrain(data, "--init", base, "--lora-rank", "4"), "init " + base},
		{"export of a full run", []string{"lora-export", base, "--out", filepath.Join(dir, "x")}, "is not a LoRA fine-tune"},
		{"not an adapter directory", []string{"generate", "--checkpoint", filepath.Join(merged, "model.safetensors"), "--lora-adapter", base}, "--lora-adapter: bad checkpoint"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != 2 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, error %q; want exit 2 and one line saying %q", c.name, code, stderr, c.want)
		}
	}
}
