package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

type trainOptions struct {
	cfg             parallel.TrainConfig
	dist            distOptions
	data            dataOptions
	out             string
	resume          string
	checkpointEvery int
	stopAt          int
	threads         int
	output          string
	memoryBudget    string
	dataDir         string
	preset          string
	device          deviceOptions
	lora            loraOptions
	init            string
}

func newTrainCmd() *cobra.Command {
	o := &trainOptions{cfg: parallel.DefaultTrainConfig()}
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train a GPT in this process",
		Long: `Train the GPT of docs/gpt.md in one process on builtin:gostd (the Go standard library's
source), a text file, a directory of text files, a .jsonl file (--text-field), or a nanoGPT
train.bin/val.bin pair. Defaults follow that recipe. Text is read as bytes (vocabulary 256),
or encoded with --tokenizer (a tokenizer.json, e.g. from meshnode tokenizer train).

With --out, checkpoints go to DIR/step-N (step-0 holds the initial weights). --resume
continues a run from a checkpoint exactly: same losses as if it had never stopped.`,
		Example: `  meshnode train --steps 300
  meshnode train --steps 300 --stop-at 150 --out ckpt && meshnode train --resume ckpt
  meshnode train --data corpus.txt --layers 6 --d-model 256 -o json
  meshnode train --data docs/ --tokenizer tokenizer.json --family llama --out ckpt
  meshnode train --init ./SmolLM2-135M --data corpus.txt --context 256 --out ckpt
  meshnode train --layers 8 --d-model 512 --memory-budget 100MiB --data-dir /var/tmp/meshnode
  meshnode train --init ./SmolLM2-135M --lora-rank 8 --lora-targets q,v --out ft && meshnode lora-export ft --out adapter`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	c := &o.cfg
	f.StringVar(&c.Data, "data", c.Data, "corpus: builtin:gostd, a text file, a directory of text files, a .jsonl file, a directory (or train.bin) of nanoGPT uint16 tokens, or a sharded corpus (meshnode tokenizer shard)")
	f.IntVar(&c.Model.Vocab, "vocab", c.Model.Vocab, "vocabulary size (256 for bytes; set it for .bin token files)")
	f.IntVar(&c.Model.Layers, "layers", c.Model.Layers, "transformer blocks")
	f.IntVar(&c.Model.DModel, "d-model", c.Model.DModel, "embedding width")
	f.IntVar(&c.Model.Heads, "heads", c.Model.Heads, "attention heads (must divide d-model)")
	f.IntVar(&c.Model.Context, "context", c.Model.Context, "sequence length")
	f.StringVar((*string)(&c.Model.Family), "family", "", "model family: gpt (the default), gpt2 (tied head) or llama (docs/models.md)")
	f.StringVar(&o.preset, "preset", "", "start from a public shape: "+strings.Join(jobspec.PresetNames(), ", ")+" (the model flags given override it)")
	f.IntVar(&c.Model.KVHeads, "kv-heads", 0, "llama: key/value heads of grouped-query attention (must divide heads; 0: heads)")
	f.IntVar(&c.Model.Intermediate, "intermediate", 0, "MLP hidden width (0: 4·d-model)")
	f.Float64Var(&c.Model.RopeTheta, "rope-theta", 0, "llama: rotary base (0: 10000)")
	f.BoolVar(&c.Model.Tied, "tied", false, "llama: lm_head is the token embedding (gpt2 always ties)")
	f.Float64Var(&c.Model.NormEps, "norm-eps", 0, "gpt2, llama: epsilon of LayerNorm/RMSNorm (0: 1e-5)")
	f.IntVar(&c.Batch, "batch", c.Batch, "sequences per step")
	f.IntVar(&c.MicroBatches, "micro-batches", c.MicroBatches, "micro-batches per step (gradient accumulation; must divide batch)")
	f.BoolVar(&c.Recompute, "recompute", false, "recompute activations in the backward pass (less memory, one more forward pass; same losses)")
	f.IntVar(&c.Steps, "steps", c.Steps, "training steps (the length of the learning-rate schedule)")
	f.Float64Var(&c.LR, "lr", c.LR, "peak learning rate")
	f.IntVar(&c.Warmup, "warmup", c.Warmup, "linear warm-up steps")
	f.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the initial weights and of the batch sampler")
	f.IntVar(&c.EvalEvery, "eval-every", c.EvalEvery, "evaluate every N steps (and at the last); 0: only at the end")
	f.IntVar(&c.EvalWindows, "eval-windows", c.EvalWindows, "validation windows")
	f.StringVar(&o.out, "out", "", "directory for checkpoints (step-0, every --checkpoint-every, and the last)")
	f.IntVar(&o.checkpointEvery, "checkpoint-every", 0, "also checkpoint every N steps (needs --out)")
	f.StringVar(&o.init, "init", "", "start from these weights: a Hugging Face model directory (config.json, model.safetensors or its sharded index, tokenizer.json: its model, weights and tokenizer; docs/models.md), or a .safetensors file or checkpoint directory of meshnode's (the model flags must match it)")
	f.StringVar(&o.resume, "resume", "", "continue from a checkpoint: a step-N directory or an --out directory (latest step)")
	f.IntVar(&o.stopAt, "stop-at", 0, "stop after this step of the schedule and checkpoint (resume later with --resume)")
	f.IntVar(&o.threads, "threads", 0, "kernel threads (0: GOMAXPROCS)")
	f.StringVar(&o.memoryBudget, "memory-budget", "", "keep at most this much training state (weights, gradients, AdamW moments) in memory, e.g. 256MiB, per stage with --stages; the rest is offloaded in chunks to a file in --data-dir (same losses; one replica only)")
	f.StringVar(&o.dataDir, "data-dir", "", "directory of the offload file with --memory-budget (the file is unlinked at once: nothing stays there)")
	o.data.addFlags(cmd)
	o.dist.addFlags(cmd)
	o.device.addFlags(cmd)
	o.lora.addFlags(cmd)
	addOutputFlag(cmd, &o.output)
	return cmd
}

// modelFlags are the flags that fix the model's shape: a resumed run cannot change them.
var modelFlags = []string{"layers", "d-model", "heads", "context", "vocab",
	"family", "kv-heads", "intermediate", "rope-theta", "tied", "norm-eps"}

// applyPreset replaces the model with --preset's shape and applies the model flags given
// on the command line over it.
func (o *trainOptions) applyPreset(cmd *cobra.Command) error {
	if o.preset == "" {
		return nil
	}
	if o.resume != "" {
		return usagef("--preset conflicts with --resume (a resumed run keeps its model)")
	}
	m, err := jobspec.PresetModel("--preset", o.preset)
	if err != nil {
		return usagef("%v", err)
	}
	given := o.cfg.Model
	o.cfg.Model = model.Config(m)
	for _, name := range modelFlags {
		if cmd.Flags().Changed(name) {
			setModelField(&o.cfg.Model, given, name)
		}
	}
	return nil
}

func (o *trainOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	if err := o.applyPreset(cmd); err != nil {
		return err
	}
	hf, err := o.loadInit(cmd)
	if err != nil {
		return err
	}
	var ck *parallel.Checkpoint
	if o.resume != "" {
		var err error
		if ck, err = parallel.LoadCheckpoint(o.resume); err != nil {
			return usagef("--resume: %v", err)
		}
		if err := o.mergeCheckpointConfig(cmd, ck); err != nil {
			return err
		}
	}
	if err := o.lora.apply(cmd, &o.cfg, o.init, ck != nil); err != nil {
		return err
	}
	if err := o.data.loadTokenizer(cmd, o); err != nil {
		return err
	}
	if err := o.applyMemoryBudget(cmd); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if o.dist.distributed() || cmd.Flags().Changed("replicas") || cmd.Flags().Changed("stages") || cmd.Flags().Changed("zero") {
		if err := o.dist.validate(cmd, o); err != nil {
			return err
		}
	}
	data, err := o.data.load(o)
	if err != nil {
		return usagef("--data: %v", err)
	}
	if err := o.data.saveTokenizer(o.out); err != nil {
		return err
	}
	o.lora.report(cmd.OutOrStdout(), o.cfg, o.output == "json")
	if o.dist.distributed() {
		if o.device.device != deviceCPU {
			return usagef("--device %s: distributed runs compute on the CPU for now (docs/gpu.md)", o.device.device)
		}
		kernels.SetThreads(o.threads)
		return o.dist.run(cmd.Context(), cmd.OutOrStdout(), o, data)
	}
	backend, closeBackend, err := o.device.open(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer closeBackend()
	o.cfg.Backend = backend
	tr, err := parallel.NewTrainer(o.cfg, data)
	if err != nil {
		return usagef("%v", err)
	}
	defer tr.Close()
	if ck != nil {
		if err := tr.Restore(ck); err != nil {
			return usagef("--resume: %v", err)
		}
	}
	if hf != nil && o.cfg.Init == "" {
		if err := o.startFromInit(tr, hf); err != nil {
			return err
		}
	}
	kernels.SetThreads(o.threads)
	if o.out != "" && ck == nil {
		if _, err := tr.SaveCheckpoint(o.out); err != nil {
			return err
		}
	}
	return o.train(cmd.Context(), cmd.OutOrStdout(), tr)
}

// mergeCheckpointConfig starts from the checkpoint's configuration and applies the flags
// given on this command line; the model's shape must not change.
func (o *trainOptions) mergeCheckpointConfig(cmd *cobra.Command, ck *parallel.Checkpoint) error {
	given := o.cfg
	o.cfg = ck.Config
	for _, name := range modelFlags {
		if cmd.Flags().Changed(name) {
			flag := cmd.Flags().Lookup(name)
			if flag.Value.String() != fmt.Sprint(modelField(ck.Config.Model, name)) {
				return usagef("--%s %s conflicts with the checkpoint's %v (a resumed run keeps its model)", name, flag.Value, modelField(ck.Config.Model, name))
			}
		}
	}
	changed := cmd.Flags().Changed
	set := func(name string, apply func()) {
		if changed(name) {
			apply()
		}
	}
	set("data", func() { o.cfg.Data = given.Data })
	set("batch", func() { o.cfg.Batch = given.Batch })
	set("micro-batches", func() { o.cfg.MicroBatches = given.MicroBatches })
	set("steps", func() { o.cfg.Steps = given.Steps })
	set("recompute", func() { o.cfg.Recompute = given.Recompute })
	set("lr", func() { o.cfg.LR = given.LR })
	set("warmup", func() { o.cfg.Warmup = given.Warmup })
	set("seed", func() { o.cfg.Seed = given.Seed })
	set("eval-every", func() { o.cfg.EvalEvery = given.EvalEvery })
	set("eval-windows", func() { o.cfg.EvalWindows = given.EvalWindows })
	return nil
}

// applyMemoryBudget parses --memory-budget and --data-dir into the run's configuration
// (after a checkpoint's, which does not carry them: they describe this machine).
func (o *trainOptions) applyMemoryBudget(cmd *cobra.Command) error {
	changed := cmd.Flags().Changed
	if !changed("memory-budget") {
		if changed("data-dir") {
			return usagef("--data-dir is the offload directory of --memory-budget, which is not set")
		}
		return nil
	}
	n, err := parseSize(o.memoryBudget)
	if err != nil || n == 0 {
		return usagef("--memory-budget: %q is not a positive size (e.g. 256MiB)", o.memoryBudget)
	}
	if o.dist.replicas > 1 {
		return usagef("--memory-budget works with one replica (drop --replicas): synchronising replicas keep full-size buffers")
	}
	if o.dataDir == "" {
		return usagef("--memory-budget needs --data-dir, the directory of the offload file")
	}
	if err := checkWritableDir(o.dataDir); err != nil {
		return usagef("--data-dir: %v", err)
	}
	o.cfg.MemoryBudget, o.cfg.OffloadDir = int64(n), o.dataDir
	applyMemoryLimit(n * uint64(max(o.dist.stages, 1))) // the budget is per stage
	return nil
}

func modelField(c model.Config, name string) any {
	return map[string]any{"layers": c.Layers, "d-model": c.DModel, "heads": c.Heads, "context": c.Context, "vocab": c.Vocab,
		"family": c.Family, "kv-heads": c.KVHeads, "intermediate": c.Intermediate, "rope-theta": c.RopeTheta,
		"tied": c.Tied, "norm-eps": c.NormEps}[name]
}

// setModelField copies the field of flag name from src into dst.
func setModelField(dst *model.Config, src model.Config, name string) {
	switch name {
	case "layers":
		dst.Layers = src.Layers
	case "d-model":
		dst.DModel = src.DModel
	case "heads":
		dst.Heads = src.Heads
	case "context":
		dst.Context = src.Context
	case "vocab":
		dst.Vocab = src.Vocab
	case "family":
		dst.Family = src.Family
	case "kv-heads":
		dst.KVHeads = src.KVHeads
	case "intermediate":
		dst.Intermediate = src.Intermediate
	case "rope-theta":
		dst.RopeTheta = src.RopeTheta
	case "tied":
		dst.Tied = src.Tied
	case "norm-eps":
		dst.NormEps = src.NormEps
	}
}

func (o *trainOptions) validate() error {
	if err := o.cfg.Validate(); err != nil {
		return usageError{err: err}
	}
	if err := o.device.validate(); err != nil {
		return err
	}
	if o.checkpointEvery < 0 {
		return usagef("--checkpoint-every must be ≥ 0 (got %d)", o.checkpointEvery)
	}
	if o.checkpointEvery > 0 && o.out == "" {
		return usagef("--checkpoint-every needs --out")
	}
	if o.stopAt < 0 || o.stopAt > o.cfg.Steps {
		return usagef("--stop-at must be between 0 and --steps (%d), got %d", o.cfg.Steps, o.stopAt)
	}
	if o.threads < 0 {
		return usagef("--threads must be ≥ 0 (got %d)", o.threads)
	}
	if o.out != "" {
		if err := checkWritableDir(o.out); err != nil {
			return usagef("--out: %v", err)
		}
	}
	return nil
}

// checkWritableDir reports whether dir is, or can be created as, a writable directory,
// without creating anything.
func checkWritableDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		st, err := os.Stat(p)
		if err == nil {
			if !st.IsDir() {
				return fmt.Errorf("%s is not a directory", p)
			}
			if err := canWriteDir(p); err != nil {
				return fmt.Errorf("%s is not writable: %v", p, err)
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("%s: no existing parent directory", dir)
		}
		p = parent
	}
}

func (o *trainOptions) train(ctx context.Context, w io.Writer, tr *parallel.Trainer) error {
	rep := newTrainReporter(w, o.output == "json", o.cfg.Steps, tr.StepsDone())
	rep.memory = func() *memoryJSON { return memoryReport(tr, o.cfg.MemoryBudget) }
	err := tr.Run(ctx, o.stopAt, o.checkpointHook(tr), rep.event)
	if o.out != "" {
		dir, serr := tr.SaveCheckpoint(o.out)
		if serr != nil {
			return serr
		}
		rep.checkpoint(dir, tr.StepsDone())
	}
	if err != nil {
		return fmt.Errorf("training stopped at step %d: %w", tr.StepsDone(), err)
	}
	return nil
}

// checkpointHook is the training loop's checkpoint hook: a checkpoint in --out every
// --checkpoint-every steps, except at the schedule's last step (train saves the final
// state once the run ends); nil without --checkpoint-every.
func (o *trainOptions) checkpointHook(tr *parallel.Trainer) func(context.Context, int) error {
	if o.checkpointEvery <= 0 {
		return nil
	}
	return func(_ context.Context, step int) error {
		if step%o.checkpointEvery != 0 || step == o.cfg.Steps {
			return nil
		}
		_, err := tr.SaveCheckpoint(o.out)
		return err
	}
}

// trainReporter prints training progress: JSON lines, or for people a progress bar (on a
// terminal) and one line per evaluation.
type trainReporter struct {
	w    io.Writer
	json bool
	bar  *progressbar.ProgressBar
	// memory, when set, reports the run's memory at the end.
	memory func() *memoryJSON
}

func newTrainReporter(w io.Writer, asJSON bool, steps, done int) *trainReporter {
	r := &trainReporter{w: w, json: asJSON}
	if f, ok := w.(*os.File); ok && !asJSON && term.IsTerminal(int(f.Fd())) {
		r.bar = progressbar.NewOptions(steps, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("training"),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
		r.bar.Set(done)
	}
	return r
}

type stepJSON struct {
	Event         string      `json:"event"`
	Step          int         `json:"step"`
	TrainLoss     *float64    `json:"train_loss,omitempty"`
	ValLoss       *float64    `json:"val_loss,omitempty"`
	TokensPerSec  *float64    `json:"tokens_per_sec,omitempty"`
	SyncBytes     *int64      `json:"sync_bytes,omitempty"`
	PipelineBytes *int64      `json:"pipeline_bytes,omitempty"`
	Checkpoint    string      `json:"checkpoint,omitempty"`
	Memory        *memoryJSON `json:"memory,omitempty"`
}

func (r *trainReporter) event(ev parallel.Event) {
	if r.json {
		rec := stepJSON{Event: ev.Kind, Step: ev.Step}
		if ev.Kind == "step" {
			rec.TrainLoss = ptr(round6(ev.TrainLoss))
		}
		if ev.HasVal {
			rec.ValLoss, rec.TokensPerSec = ptr(round6(ev.ValLoss)), ptr(round1(ev.TokensPerSec))
		}
		if ev.HasBytes {
			rec.SyncBytes, rec.PipelineBytes = ptr(ev.SyncBytes), ptr(ev.PipelineBytes)
		}
		if ev.Kind == "done" && r.memory != nil {
			rec.Memory = r.memory()
		}
		writeJSONLine(r.w, rec)
		return
	}
	if r.bar != nil && ev.Kind == "step" {
		r.bar.Set(ev.Step)
	}
	if !ev.HasVal {
		return
	}
	if r.bar != nil {
		r.bar.Clear()
	}
	traffic := ""
	if ev.HasBytes {
		traffic = fmt.Sprintf("  pipeline %s  sync %s", humanBytes(ev.PipelineBytes), humanBytes(ev.SyncBytes))
	}
	if ev.Kind == "done" {
		fmt.Fprintf(r.w, "done    step %d  val %.4f  %.0f tokens/s%s\n", ev.Step, ev.ValLoss, ev.TokensPerSec, traffic)
		if m := r.memoryOf(); m != nil && m.MemoryBudget > 0 {
			fmt.Fprintf(r.w, "memory  budget %s  resident peak %s  peak RSS %s  offload read %s written %s  waited %.1fs  direct I/O %v\n",
				humanBytes(m.MemoryBudget), humanBytes(m.ResidentPeakBytes), humanBytes(m.PeakRSSBytes),
				humanBytes(m.ReadBytes), humanBytes(m.WrittenBytes), m.WaitSeconds, m.DirectIO)
		}
		return
	}
	fmt.Fprintf(r.w, "step %d  train %.4f  val %.4f  %.0f tokens/s%s\n", ev.Step, ev.TrainLoss, ev.ValLoss, ev.TokensPerSec, traffic)
}

func (r *trainReporter) checkpoint(dir string, step int) {
	if r.json {
		writeJSONLine(r.w, stepJSON{Event: "checkpoint", Step: step, Checkpoint: dir})
		return
	}
	fmt.Fprintf(r.w, "checkpoint %s\n", dir)
}

func (r *trainReporter) memoryOf() *memoryJSON {
	if r.memory == nil {
		return nil
	}
	return r.memory()
}

// memoryJSON is the memory a single-process run used: the process's peak RSS, the
// activations' peak, and with --memory-budget the offload store's counters.
type memoryJSON struct {
	PeakRSSBytes        int64   `json:"peak_rss_bytes,omitempty"`
	GoHeapGoalBytes     int64   `json:"go_heap_goal_bytes"`
	GoRuntimeBytes      int64   `json:"go_runtime_bytes"`
	ActivationPeakBytes int64   `json:"activation_peak_bytes"`
	MemoryBudget        int64   `json:"memory_budget,omitempty"`
	BuffersBytes        int64   `json:"chunk_buffers_bytes,omitempty"`
	ResidentPeakBytes   int64   `json:"resident_peak_bytes,omitempty"`
	ChunkBytes          int64   `json:"chunk_bytes,omitempty"`
	Chunks              int     `json:"chunks,omitempty"`
	ReadBytes           int64   `json:"offload_read_bytes,omitempty"`
	WrittenBytes        int64   `json:"offload_written_bytes,omitempty"`
	IOSeconds           float64 `json:"offload_io_s,omitempty"`
	WaitSeconds         float64 `json:"offload_wait_s,omitempty"`
	DirectIO            bool    `json:"offload_direct_io,omitempty"`
}

func memoryReport(tr *parallel.Trainer, budget int64) *memoryJSON {
	m := &memoryJSON{PeakRSSBytes: peakRSS(), ActivationPeakBytes: tr.ActivationPeakBytes()}
	m.GoHeapGoalBytes, m.GoRuntimeBytes = goMemory()
	if st, ok := tr.OffloadStats(); ok {
		m.MemoryBudget, m.BuffersBytes = budget, int64(st.Buffers)*st.ChunkBytes
		m.ResidentPeakBytes, m.ChunkBytes, m.Chunks = st.ResidentPeakBytes, st.ChunkBytes, st.Chunks
		m.ReadBytes, m.WrittenBytes, m.DirectIO = st.BytesRead, st.BytesWritten, st.Direct
		m.IOSeconds, m.WaitSeconds = round3(st.IOTime.Seconds()), round3(st.WaitTime.Seconds())
	}
	return m
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// peakRSS is the process's peak resident set (VmHWM of /proc/self/status), 0 where the
// system does not say.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// goMemory is the Go heap's goal (the most the garbage collector lets the heap grow to
// before collecting, now) and the memory the Go runtime holds from the system, not
// released (heap, stacks, metadata): with the offload store's chunk buffers, which are
// mapped outside the Go heap, and the binary, what a run's RSS is made of.
func goMemory() (heapGoal, runtimeBytes int64) {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	for _, x := range s {
		if x.Value.Kind() != metrics.KindUint64 {
			return 0, 0
		}
	}
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64() - s[2].Value.Uint64())
}
