package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/kernels"
)

// benchOptions are the flags of `meshnode bench`.
type benchOptions struct {
	gemm       string        // comma-separated sizes: N or MxNxK
	forms      string        // comma-separated nn, nt, tn, tt
	accumulate bool          // C += A·B instead of C = A·B
	training   bool          // time kernels.GemmTrainingProblems() instead of --gemm
	threads    int           // 0: GOMAXPROCS
	impl       string        // "" (what Gemm uses), a name from kernels.GemmImpls(), or "all"
	minTime    time.Duration // per batch; three batches per size
	output     string

	// train holds the options of `bench --train`; see the hook below.
	train trainBenchOptions
}

// gemmResult is one line of `bench --gemm -o json`, the shape the OpenBLAS baseline of
// docs/PERFORMANCE.md prints; the transposes and beta appear only when set.
type gemmResult struct {
	Kind    string  `json:"kind"`
	Impl    string  `json:"impl"`
	M       int     `json:"m"`
	N       int     `json:"n"`
	K       int     `json:"k"`
	TransA  bool    `json:"trans_a,omitempty"`
	TransB  bool    `json:"trans_b,omitempty"`
	Beta    float32 `json:"beta,omitempty"`
	Threads int     `json:"threads"`
	GFLOPS  float64 `json:"gflops"`
	// PeakFrac is GFLOPS over the FMA peak of Threads cores (on the default path only).
	PeakFrac float64 `json:"peak_frac,omitempty"`
}

func newBenchCmd() *cobra.Command {
	o := &benchOptions{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure this machine: GEMM GFLOP/s on meshnode's own kernels",
		Long: `Measure what this machine can do with meshnode's kernels, the same measurement a node's
device profile uses. For each product: one warm-up, three batches of at least --min-time,
the median (as docs/PERFORMANCE.md measures its OpenBLAS baseline).

--gemm takes sizes N (an N×N×N product) or MxNxK; --forms picks A·B (nn), A·Bᵀ (nt),
Aᵀ·B (tn), Aᵀ·Bᵀ (tt); --training-shapes times the products a GPT's layers use instead.

The first line names the CPU, its SIMD features, the kernel paths chosen and the one-core
FMA peak of the GEMM path; each GEMM line gives its fraction of that peak. Set
MESHNODE_CPU=avx2 (or generic) to run and measure a narrower path than the CPU supports,
e.g. the AVX2 kernels on an AVX-512 machine.`,
		Example: `  meshnode bench
  meshnode bench --gemm 512,1024 --threads 1 -o json
  meshnode bench --training-shapes --impl all
  MESHNODE_CPU=avx2 meshnode bench --gemm 512,1024 --threads 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.gemm, "gemm", "128,256,512,1024,2048", "GEMM sizes to time: N or MxNxK, comma-separated")
	f.StringVar(&o.forms, "forms", "nn", "GEMM forms: nn (A·B), nt (A·Bᵀ), tn (Aᵀ·B), tt, comma-separated")
	f.BoolVar(&o.accumulate, "accumulate", false, "time C += op(A)·op(B) (beta 1) instead of C = op(A)·op(B)")
	f.BoolVar(&o.training, "training-shapes", false, "time the GEMMs of GPT training (all forms, d 128–1024) instead of --gemm")
	f.IntVar(&o.threads, "threads", envInt("MESHNODE_THREADS", 0), "kernel threads (0: GOMAXPROCS) [$MESHNODE_THREADS]")
	f.StringVar(&o.impl, "impl", "", `GEMM implementation: "" for the one meshnode uses, a name (avx512, avx2, go), or "all"`)
	f.DurationVar(&o.minTime, "min-time", 300*time.Millisecond, "minimum duration of each of the three timed batches")
	addTrainBenchFlags(f, &o.train)
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *benchOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	if o.train.enabled {
		return runTrainBench(cmd, o)
	}
	if o.threads < 0 {
		return usagef("--threads: must be ≥ 0 (got %d)", o.threads)
	}
	if o.minTime <= 0 {
		return usagef("--min-time: must be positive (got %s)", o.minTime)
	}
	impls, err := selectGemmImpls(o.impl)
	if err != nil {
		return err
	}
	problems, err := o.problems()
	if err != nil {
		return err
	}
	threads := o.threads
	if threads == 0 {
		threads = kernels.Threads()
	}
	out := cmd.OutOrStdout()
	cpuRec, err := measureCPU()
	if err != nil {
		return err
	}
	if err := printCPURecord(out, o.output, cpuRec); err != nil {
		return err
	}
	if o.output == "text" {
		fmt.Fprintf(out, gemmRowFormat, "impl", "m", "n", "k", "form", "threads", "GFLOP/s")
	}
	for _, impl := range impls {
		for _, p := range problems {
			if err := cmd.Context().Err(); err != nil {
				return err
			}
			gflops := kernels.MeasureGemmImpl(impl, p, threads, o.minTime)
			r := gemmResult{Kind: "gemm", Impl: impl.Name, M: p.M, N: p.N, K: p.K, TransA: p.TransA, TransB: p.TransB,
				Beta: p.Beta, Threads: threads, GFLOPS: roundTo(gflops, 1)}
			if impl.Name == cpuRec.Gemm && cpuRec.PeakGFLOPS > 0 {
				r.PeakFrac = roundTo(gflops/(cpuRec.PeakGFLOPS*float64(threads)), 3)
			}
			if err := printGemmResult(out, o.output, r); err != nil {
				return err
			}
		}
	}
	return nil
}

// gemmRowFormat lays out the text table of `bench --gemm` in fixed columns, so that rows
// can appear as they are measured (a size takes a second or more).
const gemmRowFormat = "%-7s %6v %6v %6v  %-10s %7v %8v\n"

func printGemmResult(out io.Writer, output string, r gemmResult) error {
	if output == "json" {
		return json.NewEncoder(out).Encode(r)
	}
	form := kernels.GemmProblem{TransA: r.TransA, TransB: r.TransB, Beta: r.Beta}.Form()
	_, err := fmt.Fprintf(out, gemmRowFormat, r.Impl, r.M, r.N, r.K, form, r.Threads, strconv.FormatFloat(r.GFLOPS, 'f', 1, 64))
	return err
}

// problems is the list of products to time, from --training-shapes or --gemm × --forms.
func (o *benchOptions) problems() ([]kernels.GemmProblem, error) {
	if o.training {
		return kernels.GemmTrainingProblems(), nil
	}
	var beta float32
	if o.accumulate {
		beta = 1
	}
	var forms [][2]bool
	for _, s := range splitList(o.forms) {
		switch s {
		case "nn", "nt", "tn", "tt":
			forms = append(forms, [2]bool{s[0] == 't', s[1] == 't'})
		default:
			return nil, usagef("--forms: %q is not one of nn, nt, tn, tt", s)
		}
	}
	var problems []kernels.GemmProblem
	for _, s := range splitList(o.gemm) {
		m, n, k, err := parseGemmSize(s)
		if err != nil {
			return nil, err
		}
		for _, f := range forms {
			problems = append(problems, kernels.GemmProblem{TransA: f[0], TransB: f[1], M: m, N: n, K: k, Beta: beta})
		}
	}
	if len(problems) == 0 {
		return nil, usagef("--gemm: no sizes given (e.g. --gemm 512,1024 or --gemm 2048x128x512)")
	}
	return problems, nil
}

// parseGemmSize reads "N" (N×N×N) or "MxNxK".
func parseGemmSize(s string) (m, n, k int, err error) {
	parts := strings.Split(s, "x")
	if len(parts) != 1 && len(parts) != 3 {
		return 0, 0, 0, usagef("--gemm: %q must be N or MxNxK", s)
	}
	dims := make([]int, len(parts))
	for i, p := range parts {
		d, err := strconv.Atoi(p)
		if err != nil || d < 1 || d > 1<<15 {
			return 0, 0, 0, usagef("--gemm: %q: sizes must be integers in 1..32768", s)
		}
		dims[i] = d
	}
	if len(dims) == 1 {
		return dims[0], dims[0], dims[0], nil
	}
	return dims[0], dims[1], dims[2], nil
}

// selectGemmImpls resolves --impl against the implementations this machine can run.
func selectGemmImpls(name string) ([]kernels.GemmImpl, error) {
	all := kernels.GemmImpls()
	switch name {
	case "":
		return all[len(all)-1:], nil
	case "all":
		return all[1:], nil // the reference is too slow to be worth timing
	}
	var names []string
	for _, impl := range all {
		if impl.Name == name {
			return []kernels.GemmImpl{impl}, nil
		}
		names = append(names, impl.Name)
	}
	return nil, usagef("--impl: %q is not available on this machine (have %s, or all)", name, strings.Join(names, ", "))
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func roundTo(x float64, digits int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	return v
}

// envInt is the integer in environment variable name, or def when unset or malformed.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
