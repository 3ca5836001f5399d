package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// trainBenchOptions are the options of `bench --train`: a model shape and batch whose
// single-process training throughput is measured.
type trainBenchOptions struct {
	enabled bool
	model   model.Config
	batch   int
	micro   int
	minTime time.Duration
}

// addTrainBenchFlags registers --train and the model flags.
func addTrainBenchFlags(f *pflag.FlagSet, o *trainBenchOptions) {
	o.model = model.DefaultConfig()
	f.BoolVar(&o.enabled, "train", false, "measure training tokens/s of a model shape instead of GEMM")
	f.IntVar(&o.model.Layers, "layers", o.model.Layers, "with --train: transformer blocks")
	f.IntVar(&o.model.DModel, "d-model", o.model.DModel, "with --train: embedding width")
	f.IntVar(&o.model.Heads, "heads", o.model.Heads, "with --train: attention heads")
	f.IntVar(&o.model.Context, "context", o.model.Context, "with --train: sequence length")
	f.IntVar(&o.batch, "batch", 16, "with --train: sequences per step")
	f.IntVar(&o.micro, "micro-batches", 1, "with --train: micro-batches per step")
	f.DurationVar(&o.minTime, "train-time", 5*time.Second, "with --train: how long to time training after one warm-up step")
}

type trainBenchJSON struct {
	Kind         string  `json:"kind"`
	Layers       int     `json:"layers"`
	DModel       int     `json:"d_model"`
	Heads        int     `json:"heads"`
	Context      int     `json:"context"`
	Batch        int     `json:"batch"`
	Threads      int     `json:"threads"`
	Steps        int     `json:"steps"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	// GemmPath and VectorPath are the kernel paths the run used (see $MESHNODE_CPU).
	GemmPath   string `json:"gemm_path"`
	VectorPath string `json:"vector_path"`
}

// runTrainBench runs `bench --train`: the measurement parallel.MeasureTraining makes.
func runTrainBench(cmd *cobra.Command, o *benchOptions) error {
	t := o.train
	if err := t.model.Validate(); err != nil {
		return usageError{err: err}
	}
	if t.batch < 1 || t.micro < 1 || t.batch%t.micro != 0 {
		return usagef("--batch (%d) must be ≥ 1 and divisible by --micro-batches (%d)", t.batch, t.micro)
	}
	if o.threads < 0 {
		return usagef("--threads: must be ≥ 0 (got %d)", o.threads)
	}
	kernels.SetThreads(o.threads)
	m, err := parallel.MeasureTraining(t.model, t.batch, t.micro, t.minTime)
	if err != nil {
		return err
	}
	rec := trainBenchJSON{Kind: "train", Layers: t.model.Layers, DModel: t.model.DModel, Heads: t.model.Heads,
		Context: t.model.Context, Batch: t.batch, Threads: kernels.Threads(), Steps: m.Steps, TokensPerSec: round1(m.TokensPerSec),
		GemmPath: kernels.CPU().Gemm, VectorPath: kernels.CPU().Vector}
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), rec)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "train  %d layers, d %d, %d heads, context %d, batch %d, %d threads: %.0f tokens/s (%d steps; %s kernels)\n",
		rec.Layers, rec.DModel, rec.Heads, rec.Context, rec.Batch, rec.Threads, rec.TokensPerSec, rec.Steps, rec.GemmPath)
	return nil
}
