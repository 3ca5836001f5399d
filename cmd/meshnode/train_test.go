package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// runCLI runs one meshnode command line in-process and returns its exit code and output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	// A command may set the process's Go memory limit (applyMemoryLimit): the test binary
	// keeps its own.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// corpus writes a small deterministic text corpus and returns its path.
func corpus(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for i := 0; b.Len() < 40000; i++ {
		b.WriteString("func f")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("() { return a + b*c }\n// comment about the mesh\n")
	}
	p := filepath.Join(t.TempDir(), "corpus.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// smallTrain is a small configuration that trains in well under a second per run.
func smallTrain(data string, extra ...string) []string {
	return append([]string{"train", "--data", data, "--layers", "2", "--d-model", "32", "--heads", "2",
		"--context", "32", "--batch", "4", "--micro-batches", "2", "--steps", "12", "--warmup", "3",
		"--lr", "3e-3", "--eval-every", "4", "--eval-windows", "8", "-o", "json"}, extra...)
}

type trainLine struct {
	Event     string   `json:"event"`
	Step      int      `json:"step"`
	TrainLoss *float64 `json:"train_loss"`
	ValLoss   *float64 `json:"val_loss"`
	TPS       *float64 `json:"tokens_per_sec"`
}

func parseTrain(t *testing.T, out string) (steps map[int]trainLine, done trainLine) {
	t.Helper()
	steps = map[int]trainLine{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l trainLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		switch l.Event {
		case "step":
			if l.TrainLoss == nil {
				t.Fatalf("step line without train_loss: %q", sc.Text())
			}
			steps[l.Step] = l
		case "done":
			done = l
		}
	}
	return steps, done
}

func TestTrainJSONOutputAndLossFalls(t *testing.T) {
	data := corpus(t)
	code, out, errs := runCLI(t, smallTrain(data)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	steps, done := parseTrain(t, out)
	if len(steps) != 12 {
		t.Fatalf("%d step lines, want 12", len(steps))
	}
	if steps[4].ValLoss == nil || steps[4].TPS == nil || steps[3].ValLoss != nil {
		t.Fatal("val_loss and tokens_per_sec belong on eval steps only (4, 8, 12)")
	}
	if done.Event != "done" || done.ValLoss == nil || done.Step != 12 {
		t.Fatalf("no done line: %+v", done)
	}
	if !(*steps[12].TrainLoss < *steps[1].TrainLoss-0.5) {
		t.Fatalf("training loss did not fall: %v → %v", *steps[1].TrainLoss, *steps[12].TrainLoss)
	}
}

// TestTrainIsDeterministic: same seed, same losses, bit for bit; and the same losses with
// one or two threads (kernels never split a reduction between threads).
func TestTrainIsDeterministic(t *testing.T) {
	data := corpus(t)
	_, a, _ := runCLI(t, smallTrain(data)...)
	_, b, _ := runCLI(t, smallTrain(data)...)
	if la, lb := losses(t, a), losses(t, b); la != lb {
		t.Fatalf("two runs with the same seed differ:\n%s\n%s", la, lb)
	}
	prev := runtime.GOMAXPROCS(1)
	_, one, _ := runCLI(t, smallTrain(data)...)
	runtime.GOMAXPROCS(2)
	_, two, _ := runCLI(t, smallTrain(data)...)
	runtime.GOMAXPROCS(prev)
	s1, _ := parseTrain(t, one)
	s2, _ := parseTrain(t, two)
	for k, l := range s1 {
		if d := *l.TrainLoss - *s2[k].TrainLoss; d > 1e-5 || d < -1e-5 {
			t.Fatalf("step %d: GOMAXPROCS=1 loss %v, GOMAXPROCS=2 %v", k, *l.TrainLoss, *s2[k].TrainLoss)
		}
	}
	_, c, _ := runCLI(t, smallTrain(data, "--seed", "2")...)
	if losses(t, c) == losses(t, a) {
		t.Fatal("a different seed gave the same run")
	}
}

// TestTrainResumeMatchesUninterruptedRun: stop at step 5, resume to 12, same losses.
func TestTrainResumeMatchesUninterruptedRun(t *testing.T) {
	data := corpus(t)
	_, full, _ := runCLI(t, smallTrain(data)...)
	out := filepath.Join(t.TempDir(), "ckpt")
	code, first, errs := runCLI(t, smallTrain(data, "--out", out, "--stop-at", "5")...)
	if code != 0 {
		t.Fatalf("first half: exit %d: %s", code, errs)
	}
	for _, d := range []string{"step-0", "step-5"} {
		if _, err := os.Stat(filepath.Join(out, d, "model.safetensors")); err != nil {
			t.Fatalf("checkpoint %s missing: %v", d, err)
		}
	}
	code, second, errs := runCLI(t, "train", "--resume", out, "-o", "json")
	if code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errs)
	}
	fs, fdone := parseTrain(t, full)
	s1, _ := parseTrain(t, first)
	s2, done := parseTrain(t, second)
	if len(s1) != 5 || len(s2) != 7 {
		t.Fatalf("runs of %d and %d steps, want 5 and 7", len(s1), len(s2))
	}
	for k, l := range fs {
		got, ok := s1[k]
		if !ok {
			got = s2[k]
		}
		if *got.TrainLoss != *l.TrainLoss {
			t.Fatalf("step %d: resumed run %v, uninterrupted %v", k, *got.TrainLoss, *l.TrainLoss)
		}
	}
	if *done.ValLoss != *fdone.ValLoss {
		t.Fatalf("final validation loss %v, uninterrupted %v", *done.ValLoss, *fdone.ValLoss)
	}
}

func TestGenerateFromCheckpoint(t *testing.T) {
	data := corpus(t)
	out := filepath.Join(t.TempDir(), "ckpt")
	if code, _, errs := runCLI(t, smallTrain(data, "--out", out)...); code != 0 {
		t.Fatal(errs)
	}
	args := []string{"generate", "--checkpoint", out, "--prompt", "func ", "--tokens", "40", "--seed", "3", "-o", "json"}
	code, a, errs := runCLI(t, args...)
	if code != 0 {
		t.Fatal(errs)
	}
	var res struct {
		Text      string `json:"text"`
		Generated int    `json:"generated_tokens"`
	}
	if err := json.Unmarshal([]byte(a), &res); err != nil || res.Generated != 40 || !strings.HasPrefix(res.Text, "func ") {
		t.Fatalf("generate output %q (%v)", a, err)
	}
	if _, b, _ := runCLI(t, args...); b != a {
		t.Fatal("same seed, different text")
	}
}

// TestBadInputIsOneLineExitTwoNothingWritten covers acceptance point 5 of the engine issue.
func TestBadInputIsOneLineExitTwoNothingWritten(t *testing.T) {
	data := corpus(t)
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	short := filepath.Join(dir, "short.txt")
	os.WriteFile(short, []byte(strings.Repeat("abc", 20)), 0o644)
	notDir := filepath.Join(dir, "file")
	os.WriteFile(notDir, []byte("x"), 0o644)

	// A checkpoint with a tensor missing, and one with a mis-shaped tensor.
	good := filepath.Join(dir, "good")
	if code, _, errs := runCLI(t, smallTrain(data, "--out", good, "--stop-at", "1")...); code != 0 {
		t.Fatal(errs)
	}
	broken := brokenCheckpoint(t, filepath.Join(good, "step-1"), dir)

	out := filepath.Join(dir, "out")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing data", smallTrain(filepath.Join(dir, "nope.txt"), "--out", out), "--data"},
		{"empty data", smallTrain(empty, "--out", out), "is empty"},
		{"short corpus", smallTrain(short, "--out", out), "fewer than context"},
		{"heads", smallTrain(data, "--out", out, "--heads", "3"), "d-model (32) must be divisible by heads (3)"},
		{"zero layers", smallTrain(data, "--out", out, "--layers", "0"), "layers must be ≥ 1 (got 0)"},
		{"negative batch", smallTrain(data, "--out", out, "--batch", "-4"), "batch must be ≥ 1 (got -4)"},
		{"zero steps", smallTrain(data, "--out", out, "--steps", "0"), "steps must be ≥ 1"},
		{"bad flag value", smallTrain(data, "--out", out, "--layers", "four"), "--layers"},
		{"out is a file", smallTrain(data, "--out", filepath.Join(notDir, "sub")), "--out"},
		{"missing tensor", []string{"train", "--resume", broken.missing, "--out", out}, "transformer.h.1.mlp.c_fc.bias is missing"},
		{"misshapen tensor", []string{"train", "--resume", broken.misshapen, "--out", out}, "has shape"},
		{"generate missing tensor", []string{"generate", "--checkpoint", filepath.Join(broken.missing, "model.safetensors")}, "is missing"},
		{"generate no checkpoint", []string{"generate"}, "--checkpoint is required"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(t, c.args...)
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", c.name, code, stderr)
			continue
		}
		if strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: error %q should be one line mentioning %q", c.name, stderr, c.want)
		}
		if stdout != "" {
			t.Errorf("%s: printed %q before failing", c.name, stdout)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%s: wrote %s", c.name, out)
		}
	}
}

// losses renders a run's training and validation losses (not its timings) for comparison.
func losses(t *testing.T, out string) string {
	steps, done := parseTrain(t, out)
	var b strings.Builder
	for k := 1; k <= len(steps); k++ {
		b.WriteString(strconv.FormatFloat(*steps[k].TrainLoss, 'g', -1, 64) + " ")
	}
	return b.String() + strconv.FormatFloat(*done.ValLoss, 'g', -1, 64)
}

type brokenCheckpoints struct{ missing, misshapen string }

// brokenCheckpoint copies a checkpoint twice, once dropping a tensor and once reshaping one.
func brokenCheckpoint(t *testing.T, src, dir string) brokenCheckpoints {
	t.Helper()
	b := brokenCheckpoints{missing: filepath.Join(dir, "missing"), misshapen: filepath.Join(dir, "misshapen")}
	for _, dst := range []string{b.missing, b.misshapen} {
		os.MkdirAll(dst, 0o755)
		for _, f := range []string{"model.safetensors", "optimizer.safetensors", "trainer.json"} {
			data, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dst, f), data, 0o644)
		}
	}
	rewriteModel(t, b.missing, func(tf map[string][]int) { delete(tf, "transformer.h.1.mlp.c_fc.bias") })
	rewriteModel(t, b.misshapen, func(tf map[string][]int) { tf["lm_head.weight"] = []int{32, 256} })
	return b
}

func TestTrainDistributedOverQUIC(t *testing.T) {
	data := corpus(t)
	for _, sync := range [][]string{{"--sync", "diloco"}, {"--sync", "streaming", "--fragments", "2"}} {
		args := smallTrain(data, append([]string{"--stages", "2", "--replicas", "2", "--inner-steps", "4", "--codec", "int8", "--steps", "8"}, sync...)...)
		checkDistributedRun(t, args)
	}
	for _, bad := range [][]string{
		{"--stages", "9"}, {"--replicas", "0"}, {"--stages", "2", "--codec", "zip"},
		{"--stages", "2", "--sync", "sometimes"}, {"--stages", "2", "--out", t.TempDir()},
		{"--stages", "2", "--sync", "streaming", "--fragments", "9"},
		{"--stages", "2", "--sync", "streaming", "--inner-steps", "4", "--overlap", "4"},
	} {
		code, _, errs := runCLI(t, smallTrain(data, bad...)...)
		if code != 2 || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: exit %d, %q", bad, code, errs)
		}
	}
}

// checkDistributedRun runs a split training and checks that it ends with traffic counts.
func checkDistributedRun(t *testing.T, args []string) {
	t.Helper()
	code, out, errs := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errs)
	}
	var done struct {
		Event         string  `json:"event"`
		ValLoss       float64 `json:"val_loss"`
		SyncBytes     *int64  `json:"sync_bytes"`
		PipelineBytes *int64  `json:"pipeline_bytes"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &done); err != nil || done.Event != "done" {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if done.SyncBytes == nil || *done.SyncBytes == 0 || done.PipelineBytes == nil || *done.PipelineBytes == 0 {
		t.Fatalf("done event lacks traffic counts: %s", lines[len(lines)-1])
	}
}

func TestBenchTrainJSON(t *testing.T) {
	code, out, errs := runCLI(t, "bench", "--train", "--layers", "1", "--d-model", "32", "--heads", "2", "--context", "16",
		"--batch", "2", "--train-time", "1ms", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var rec struct {
		Kind         string  `json:"kind"`
		TokensPerSec float64 `json:"tokens_per_sec"`
	}
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Kind != "train" || rec.TokensPerSec <= 0 {
		t.Fatalf("bench --train printed %q (%v)", out, err)
	}
	if code, _, _ := runCLI(t, "bench", "--train", "--heads", "3"); code != 2 {
		t.Fatalf("d-model 128 with 3 heads: exit %d, want 2", code)
	}
}
