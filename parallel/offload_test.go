package parallel

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

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
			a, b := step(t, ref), step(t, tr)
			if math.Float64bits(a) != math.Float64bits(b) {
				t.Fatalf("recompute=%v step %d: loss %v in memory, %v offloaded", recompute, s, a, b)
			}
		}
		if a, b := evaluate(t, ref), evaluate(t, tr); a != b {
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
		l := step(t, ref)
		if s >= 4 {
			want = append(want, l)
		} else {
			step(t, tr)
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
			if got := step(t, r); got != w {
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

// TestOffloadLargeModel is the acceptance run of docs/PERFORMANCE.md ("Chunked offload
// under a memory budget"), behind MESHNODE_OFFLOAD_BENCH=1 (minutes): a 25M-parameter
// model (8 blocks of width 512) trained 20 steps in memory and under a budget of a quarter
// of its training state, the two trainers' steps interleaved so that both see the same
// machine load: bit-identical losses, the resident peak within the budget, and the ratio
// of step times. MESHNODE_OFFLOAD_DIR chooses the offload directory (default a temporary
// one).
func TestOffloadLargeModel(t *testing.T) {
	if os.Getenv("MESHNODE_OFFLOAD_BENCH") != "1" {
		t.Skip("set MESHNODE_OFFLOAD_BENCH=1 to run the 25M-parameter offload measurement")
	}
	cfg := DefaultTrainConfig()
	cfg.Model = model.Config{Vocab: 256, Context: 128, Layers: 8, DModel: 512, Heads: 8}
	cfg.Batch, cfg.Steps, cfg.Recompute, cfg.EvalWindows = 8, 20, true, 8
	data, err := model.LoadDataset(cfg.Data, cfg.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	off := cfg
	off.MemoryBudget, off.OffloadDir = stateBytes(cfg.Model)/4, os.Getenv("MESHNODE_OFFLOAD_DIR")
	if off.OffloadDir == "" {
		off.OffloadDir = t.TempDir()
	}
	ref, err := NewTrainer(cfg, data)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(off, data)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var inMem, offloaded time.Duration
	for s := 0; s < cfg.Steps; s++ {
		start := time.Now()
		a := step(t, ref)
		mid := time.Now()
		b := step(t, tr)
		inMem, offloaded = inMem+mid.Sub(start), offloaded+time.Since(mid)
		if math.Float64bits(a) != math.Float64bits(b) {
			t.Fatalf("step %d: loss %v in memory, %v offloaded", s, a, b)
		}
	}
	st, _ := tr.OffloadStats()
	if st.ResidentPeakBytes > off.MemoryBudget {
		t.Errorf("resident peak %d over the budget %d", st.ResidentPeakBytes, off.MemoryBudget)
	}
	t.Logf("state %d B, budget %d B, chunks %d of %d B, %d buffers, resident peak %d B, direct I/O %v",
		stateBytes(cfg.Model), off.MemoryBudget, st.Chunks, st.ChunkBytes, st.Buffers, st.ResidentPeakBytes, st.Direct)
	t.Logf("20 steps: in memory %.1fs, offloaded %.1fs (ratio %.3f); read %.2f GB, written %.2f GB, I/O %.1fs, waited %.1fs",
		inMem.Seconds(), offloaded.Seconds(), offloaded.Seconds()/inMem.Seconds(),
		float64(st.BytesRead)/1e9, float64(st.BytesWritten)/1e9, st.IOTime.Seconds(), st.WaitTime.Seconds())
}
