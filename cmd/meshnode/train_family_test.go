package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTrainFamiliesAndTheirBadInput: each family trains from the command line with its
// loss falling, a Llama checkpoint resumes and generates, and a bad family, preset or
// family field exits 2 with one line naming it, writing nothing.
func TestTrainFamiliesAndTheirBadInput(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	for _, fam := range [][]string{{"--family", "gpt2"}, {"--family", "llama", "--kv-heads", "1", "--tied"}} {
		code, out, errs := runCLI(t, smallTrain(data, fam...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", fam, code, errs)
		}
		steps, done := parseTrain(t, out)
		if !(*done.ValLoss < *steps[1].TrainLoss) {
			t.Errorf("%v: validation loss %v did not fall below the first step's %v", fam, *done.ValLoss, *steps[1].TrainLoss)
		}
	}
	ck := filepath.Join(dir, "llama")
	if code, _, errs := runCLI(t, smallTrain(data, "--family", "llama", "--kv-heads", "1", "--out", ck, "--stop-at", "6")...); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := runCLI(t, "train", "--resume", ck, "-o", "json"); code != 0 {
		t.Fatalf("resume: %s", errs)
	}
	if code, out, errs := runCLI(t, "generate", "--checkpoint", ck, "--tokens", "8"); code != 0 || out == "" {
		t.Fatalf("generate from a Llama checkpoint: exit %d %s", code, errs)
	}

	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown family", smallTrain(data, "--out", out, "--family", "mamba"), `family: must be one of gpt, gpt2, llama, got "mamba"`},
		{"unknown preset", smallTrain(data, "--out", out, "--preset", "gpt5"), `--preset: unknown preset "gpt5"`},
		{"kv heads", smallTrain(data, "--out", out, "--family", "llama", "--kv-heads", "3"), "kv-heads (3) must divide heads (2)"},
		{"kv heads without llama", smallTrain(data, "--out", out, "--kv-heads", "1"), "kv-heads (1) needs family llama"},
		{"tied gpt", smallTrain(data, "--out", out, "--tied"), "tied needs family gpt2 or llama"},
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
