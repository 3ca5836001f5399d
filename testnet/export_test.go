package testnet

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// referenceTrainer finds the PyTorch reference trainer (docs/reference/gpt_ref.py,
// or $MESHNODE_GPT_REF) and a Python with torch ($MESHNODE_PYTHON, else
// /usr/bin/python3, else python3), or skips: they are outside the Go toolchain that CI has.
func referenceTrainer(t *testing.T) (python, script string) {
	t.Helper()
	script = os.Getenv("MESHNODE_GPT_REF")
	if script == "" {
		script, _ = filepath.Abs(filepath.Join("..", "docs", "reference", "gpt_ref.py"))
	}
	if _, err := os.Stat(script); err != nil {
		t.Skipf("no PyTorch reference trainer at %s (set MESHNODE_GPT_REF)", script)
	}
	for _, p := range []string{os.Getenv("MESHNODE_PYTHON"), "/usr/bin/python3", "python3"} {
		if p != "" && exec.Command(p, "-c", "import torch").Run() == nil {
			return p, script
		}
	}
	t.Skip("no Python with torch (set MESHNODE_PYTHON)")
	return "", ""
}

// TestExportLoadsIntoPyTorchReference: a job split over two nodes trains on builtin:gostd;
// `meshnode export` assembles its step-10 checkpoint from both stages' files, and the
// PyTorch reference trainer, started from that file (--init, learning rate 0 for its one
// step, so the weights stay as loaded), reports the validation loss meshnode reported at
// that step.
func TestExportLoadsIntoPyTorchReference(t *testing.T) {
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	python, script := referenceTrainer(t)
	tn := startTestnet(t, oneRegion(2))
	spec := jobspec.DefaultSpec()
	spec.Name = "export"
	spec.Model = jobspec.Model{Layers: 2, DModel: 32, Heads: 2, Context: 32, Vocab: 256}
	spec.Train.Steps, spec.Train.Batch, spec.Train.MicroBatches, spec.Train.EvalEvery, spec.Train.Warmup = 20, 8, jobspec.Fixed(2), 10, 5
	spec.Parallel.Replicas, spec.Parallel.Sync = jobspec.Fixed(1), jobspec.SyncEveryStep
	spec.Placement.Strategy = jobspec.StrategyEven
	spec.Checkpoint.Every = 10
	raw, _ := spec.Document()
	via := tn.Nodes()[0]
	d := submitJob(t, tn, via, raw).waitDone(3 * time.Minute)
	if n := len(planOf(d).Nodes()); n != 2 {
		t.Fatalf("the job ran on %d node(s), want a split over 2", n)
	}
	var want float64
	for _, s := range d.Progress.Samples {
		if s.Step == 10 && s.ValLoss != nil {
			want = *s.ValLoss
		}
	}
	if want == 0 {
		t.Fatalf("no validation loss reported at step 10: %+v", d.Progress.Samples)
	}

	out := filepath.Join(t.TempDir(), "model.safetensors")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, meshnodeBinary(t), "export", d.ID, "--step", "10", "--out", out, "--data-dir", via.DataDir).CombinedOutput(); err != nil {
		t.Fatalf("meshnode export: %v\n%s", err, b)
	}
	m := spec.Model
	cmd := exec.CommandContext(ctx, python, script, "--init", out, "--json", "--steps", "1", "--lr", "0",
		"--layers", strconv.Itoa(m.Layers), "--d-model", strconv.Itoa(m.DModel), "--heads", strconv.Itoa(m.Heads),
		"--context", strconv.Itoa(m.Context), "--batch", strconv.Itoa(spec.Train.Batch), "--threads", "1")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpt_ref.py: %v\n%s", err, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var done struct {
		Event   string  `json:"event"`
		ValLoss float64 `json:"val_loss"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &done); err != nil || done.Event != "done" {
		t.Fatalf("gpt_ref.py output ends %q: %v", lines[len(lines)-1], err)
	}
	t.Logf("step-10 checkpoint: meshnode val %.6f, PyTorch on the export %.6f", want, done.ValLoss)
	if math.Abs(done.ValLoss-want) > 1e-4*want {
		t.Errorf("PyTorch's validation loss on the export is %.6f, meshnode reported %.6f at that step", done.ValLoss, want)
	}
}
