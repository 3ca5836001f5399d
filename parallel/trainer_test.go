package parallel

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

func testData() *model.Dataset {
	text := []byte(strings.Repeat("package mesh // the quick brown fox jumps over the lazy dog 0123456789\n", 400))
	cut := len(text) * 95 / 100
	return &model.Dataset{Source: "test", Train: model.ByteTokens(text[:cut]), Val: model.ByteTokens(text[cut:]), Vocab: 256}
}

func testConfig() TrainConfig {
	c := DefaultTrainConfig()
	c.Model = model.Config{Layers: 2, DModel: 32, Heads: 4, Context: 24, Vocab: 256}
	c.Batch, c.MicroBatches, c.Steps, c.Warmup, c.EvalEvery, c.EvalWindows = 6, 3, 8, 2, 4, 6
	return c
}

func runLosses(t *testing.T, threads int) ([]float64, *Trainer) {
	t.Helper()
	kernels.SetThreads(threads)
	defer kernels.SetThreads(0)
	tr, err := NewTrainer(testConfig(), testData())
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	if err := tr.Run(context.Background(), 0, nil, func(ev Event) {
		if ev.Kind == "step" {
			losses = append(losses, ev.TrainLoss)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return losses, tr
}

// TestTrainerBitIdenticalAcrossRunsAndThreads: no reduction is split between threads, so
// the weights after training are the same bits with 1 or 2 threads and across runs.
func TestTrainerBitIdenticalAcrossRunsAndThreads(t *testing.T) {
	l1, t1 := runLosses(t, 1)
	l2, t2 := runLosses(t, 2)
	for i := range l1 {
		if l1[i] != l2[i] {
			t.Fatalf("step %d: loss %v with 1 thread, %v with 2", i+1, l1[i], l2[i])
		}
	}
	p1, p2 := t1.Model().Params(), t2.Model().Params()
	for i := range p1 {
		for k := range p1[i].Value.Data {
			if p1[i].Value.Data[k] != p2[i].Value.Data[k] {
				t.Fatalf("%s[%d] differs between thread counts", p1[i].Name, k)
			}
		}
	}
	if !(l1[len(l1)-1] < l1[0]) {
		t.Fatalf("loss did not fall: %v", l1)
	}
}

func TestCheckpointRestoreIsExact(t *testing.T) {
	full, _ := runLosses(t, 0)
	tr, err := NewTrainer(testConfig(), testData())
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Run(context.Background(), 3, nil, func(Event) {}); err != nil {
		t.Fatal(err)
	}
	dir, err := tr.SaveCheckpoint(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ck, err := LoadCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := NewTrainer(ck.Config, testData())
	if err != nil {
		t.Fatal(err)
	}
	if err := resumed.Restore(ck); err != nil {
		t.Fatal(err)
	}
	var got []float64
	resumed.Run(context.Background(), 0, nil, func(ev Event) {
		if ev.Kind == "step" {
			got = append(got, ev.TrainLoss)
		}
	})
	for i, l := range got {
		if l != full[3+i] {
			t.Fatalf("step %d: resumed %v, uninterrupted %v", 4+i, l, full[3+i])
		}
	}
}

func TestLearningRateSchedule(t *testing.T) {
	cases := []struct {
		s    int
		want float64
	}{{0, 1e-3 / 10}, {9, 1e-3}, {10, 1e-3}, {110, 1e-4}, {60, 0.1e-3 + 0.9e-3*0.5}}
	for _, c := range cases {
		if got := LearningRate(c.s, 1e-3, 10, 110); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("lr(%d) = %g, want %g", c.s, got, c.want)
		}
	}
}

func TestTrainConfigValidateNamesEveryBadField(t *testing.T) {
	c := testConfig()
	c.Batch, c.MicroBatches, c.LR, c.Warmup = 5, 2, 0, -1
	err := c.Validate()
	for _, want := range []string{"batch (5) must be divisible by micro-batches (2)", "lr must be > 0", "warmup must be ≥ 0"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// step runs one step of tr and returns its loss, failing the test on an error.
func step(t testing.TB, tr *Trainer) float64 {
	t.Helper()
	loss, err := tr.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

// evaluate returns tr's validation loss, failing the test on an error.
func evaluate(t testing.TB, tr *Trainer) float64 {
	t.Helper()
	loss, err := tr.Evaluate(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return loss
}

// TestTruncatedDataFileFailsTheStep: a token file truncated while a job trains fails the
// step with an error naming the file (model.ErrBadData), instead of a panic in the sampler.
func TestTruncatedDataFileFailsTheStep(t *testing.T) {
	dir := t.TempDir()
	b := make([]byte, 2*20000)
	for i := range 20000 {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i*31%256))
	}
	for _, name := range []string{"train.bin", "val.bin"} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := model.LoadDataset(dir, 256)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.EvalEvery = 0
	tr, err := NewTrainer(cfg, data)
	if err != nil {
		t.Fatal(err)
	}
	train := filepath.Join(dir, "train.bin")
	if err := os.Truncate(train, 64); err != nil { // 32 tokens: every window of 24+1 past offset 7 is gone
		t.Fatal(err)
	}
	err = tr.Run(context.Background(), 0, nil, func(Event) {})
	if !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), train) {
		t.Fatalf("training on a truncated file: got %v, want ErrBadData naming %s", err, train)
	}
}
