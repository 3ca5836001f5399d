package parallel

import (
	"math"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/model"
)

// offloadTestConfig is a small model whose training state is many chunks.
func offloadTestConfig(t *testing.T) (TrainConfig, *model.Dataset) {
	t.Helper()
	cfg := DefaultTrainConfig()
	cfg.Model = model.Config{Vocab: 256, Context: 16, Layers: 3, DModel: 32, Heads: 2}
	cfg.Batch, cfg.MicroBatches, cfg.Steps, cfg.Warmup = 4, 2, 20, 3
	data, err := model.LoadDataset(cfg.Data, cfg.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, data
}

// stateBytes is the training state of cfg's model: 16 bytes per parameter.
func stateBytes(cfg model.Config) int64 {
	var n int64
	for _, p := range model.New(cfg, 1).Params() {
		n += int64(len(p.Value.Data))
	}
	return 16 * n
}

// TestOffloadTrainsBitIdentically trains 20 steps in memory and under a budget of a
// quarter of the training state (with and without recomputation): the losses are the
// same bits, the resident chunks never exceed the budget, and chunks really moved.
func TestOffloadTrainsBitIdentically(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	for _, recompute := range []bool{false, true} {
		cfg.Recompute = recompute
		ref, err := NewTrainer(cfg, data)
		if err != nil {
			t.Fatal(err)
		}
		off := cfg
		off.MemoryBudget, off.OffloadDir = stateBytes(cfg.Model)/4, t.TempDir()
		tr, err := NewTrainer(off, data)
		if err != nil {
			t.Fatal(err)
		}
		for s := 0; s < cfg.Steps; s++ {
			a, b := ref.Step(), tr.Step()
			if math.Float64bits(a) != math.Float64bits(b) {
				t.Fatalf("recompute=%v step %d: loss %v in memory, %v offloaded", recompute, s, a, b)
			}
		}
		if a, b := ref.Evaluate(), tr.Evaluate(); a != b {
			t.Errorf("recompute=%v: validation loss %v in memory, %v offloaded", recompute, a, b)
		}
		st, _ := tr.OffloadStats()
		if st.ResidentPeakBytes > off.MemoryBudget || st.ResidentPeakBytes == 0 {
			t.Errorf("resident peak %d, budget %d", st.ResidentPeakBytes, off.MemoryBudget)
		}
		if st.BytesRead == 0 || st.BytesWritten == 0 || int64(st.Buffers)*st.ChunkBytes > off.MemoryBudget {
			t.Errorf("nothing offloaded or buffers over budget: %+v", st)
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOffloadCheckpointRoundTrip checkpoints an offloaded run, resumes it in memory and
// offloaded, and checks that both continue with the uninterrupted run's losses.
func TestOffloadCheckpointRoundTrip(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	cfg.Steps = 8
	ref, _ := NewTrainer(cfg, data)
	off := cfg
	off.MemoryBudget, off.OffloadDir = stateBytes(cfg.Model)/4, t.TempDir()
	tr, err := NewTrainer(off, data)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var want []float64
	for s := 0; s < cfg.Steps; s++ {
		l := ref.Step()
		if s >= 4 {
			want = append(want, l)
		} else {
			tr.Step()
		}
	}
	out := t.TempDir()
	if _, err := tr.SaveCheckpoint(out); err != nil {
		t.Fatal(err)
	}
	ck, err := LoadCheckpoint(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []TrainConfig{cfg, off} {
		r, err := NewTrainer(c, data)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Restore(ck); err != nil {
			t.Fatal(err)
		}
		for i, w := range want {
			if got := r.Step(); got != w {
				t.Fatalf("budget %d: resumed step %d loss %v, want %v", c.MemoryBudget, 4+i, got, w)
			}
		}
		r.Close()
	}
}

// TestOffloadBudgetErrors: a budget below one layer's weights and gradients, and a budget
// without a directory, are errors naming the field; nothing is created.
func TestOffloadBudgetErrors(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	cfg.MemoryBudget, cfg.OffloadDir = 4096, t.TempDir()+"/never"
	if _, err := NewTrainer(cfg, data); err == nil || !strings.Contains(err.Error(), "memory-budget: ") {
		t.Errorf("tiny budget: %v", err)
	}
	cfg.OffloadDir = ""
	if _, err := NewTrainer(cfg, data); err == nil || !strings.Contains(err.Error(), "memory-budget needs data-dir") {
		t.Errorf("no directory: %v", err)
	}
	cfg.MemoryBudget = -1
	if _, err := NewTrainer(cfg, data); err == nil || !strings.Contains(err.Error(), "memory-budget must be ≥ 0") {
		t.Errorf("negative budget: %v", err)
	}

}
