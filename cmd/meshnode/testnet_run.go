package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/records"
	"github.com/meshnode/meshnode/testnet"
)

type testnetRunOptions struct {
	topo    topologyOptions
	dir     string
	steps   int
	job     string
	timeout time.Duration
	output  string
	cmp     compareOptions
}

func newTestnetRunCmd() *cobra.Command {
	o := &testnetRunOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Start a local testnet, train the default job on it, print a summary and shut down",
		Long: `Start a testnet (default: 4 nodes in 2 emulated regions, slowdowns 1, 1, 2 and 3), wait until
every node has measured itself and its links, submit the default job (the default GPT on
builtin:gostd, --steps steps) or --job FILE, follow its progress, print a summary (each
node's emulated slowdown, measured speeds, memory budget, replica and layers in the plan;
whether any node could hold the model alone and the balancer's reason for the layout; step
time against the prediction, tokens/s, bytes on the wire per step, initial and final
validation loss) and stop every process. The default nodes offer 12 MiB each, less than
the default model's training state, so the default job is always cut across nodes.
It exits 0 when the job ends "done". Ctrl-C stops everything.

Without --dir the testnet lives in a temporary directory removed at the end; with --dir it
is kept (node logs in DIR/<node>/node.log).

--compare measures time to loss instead (docs/testnet.md): the same job once per variant
(--variants: the planner's choice, every-step sync over two replicas, one pipeline, DiLoCo
and streaming DiLoCo over two replicas), each on a fresh testnet for --budget of wall time
from submit, evaluated every --eval-every steps; it prints each run's plan, step time,
steps, validation loss at the budget and time to a target loss, the loss-against-time
curves, and with --plot an SVG of them. --wan sets the links between regions.`,
		Example: `  meshnode testnet run
  meshnode testnet run --nodes 3 --steps 60 -o json
  meshnode testnet run --topology geo.yaml --job job.yaml --dir /tmp/tn
  meshnode testnet run --compare --wan 20mbit,80ms --budget 90s --plot ttl.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	addTopologyFlags(cmd, &o.topo)
	cmd.Flags().StringVar(&o.dir, "dir", "", "keep the testnet in this directory (default: a temporary one, removed)")
	cmd.Flags().IntVar(&o.steps, "steps", 300, "training steps of the default job")
	cmd.Flags().StringVar(&o.job, "job", "", "job spec to submit instead of the default job (docs/jobspec.md)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up on the job after this long")
	addCompareFlags(cmd, &o.cmp)
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func (o *testnetRunOptions) run(cmd *cobra.Command) (err error) {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	variants, err := o.cmp.check(cmd)
	if err != nil {
		return err
	}
	var wan testnet.LinkSpec
	if o.cmp.wan != "" {
		if wan, err = parseWAN(o.cmp.wan); err != nil {
			return err
		}
	}
	if o.cmp.from != "" {
		runs, title, budget, err := loadCompareRuns(o.cmp.from)
		if err != nil {
			return err
		}
		return o.printCompare(newTestnetReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.output == "json"), runs, title, budget)
	}
	var spec jobspec.Spec
	nodes := 0
	if !o.cmp.on {
		spec, err = o.spec(cmd)
	} else if topo, terr := o.topo.topology(cmd); terr != nil {
		err = terr
	} else {
		nodes = len(topo.Nodes)
		spec, err = o.compareSpec(cmd, nodes)
	}
	if err != nil {
		return err
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "meshnode-testnet-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	if o.cmp.on {
		return o.runCompare(cmd, variants, spec, nodes, dir)
	}
	cfg, err := o.topo.config(cmd, dir)
	if err != nil {
		return err
	}
	if o.cmp.wan != "" {
		cfg.Topology = withWAN(cfg.Topology, wan)
	}
	if o.job == "" {
		spec.Placement.MinNodes = len(cfg.Topology.Nodes)
	}
	tn, err := testnet.New(cfg)
	if err != nil {
		return err
	}
	defer func() {
		if serr := tn.Stop(); err == nil && serr != nil {
			err = serr
		}
	}()
	rep := newTestnetReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.output == "json")
	ctx := cmd.Context()
	if err := tn.Launch(ctx, rep); err != nil {
		return err
	}
	// A data path given to testnet run lies under the working directory, as with submit.
	wd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	sum, err := tn.Train(ctx, spec, wd, o.timeout, rep)
	if sum.Job != "" {
		rep.summary(sum)
	}
	return err
}

// spec is --job, or the default job: the default model on builtin:gostd for --steps.
func (o *testnetRunOptions) spec(cmd *cobra.Command) (jobspec.Spec, error) {
	if o.job != "" {
		if cmd.Flags().Changed("steps") {
			return jobspec.Spec{}, usagef("--steps and --job: set train.steps in the job file instead")
		}
		return loadSpec(o.job, cmd.InOrStdin())
	}
	if o.steps < 1 {
		return jobspec.Spec{}, usagef("--steps: must be ≥ 1 (got %d)", o.steps)
	}
	return defaultTestnetJob(o.steps), nil
}

// defaultTestnetJob is the job `testnet run` submits: the default spec for steps, with
// evaluations that divide the run (so the last step is evaluated) and one checkpoint.
func defaultTestnetJob(steps int) jobspec.Spec {
	s := jobspec.DefaultSpec()
	s.Name = "testnet"
	s.Train.Steps = steps
	s.Train.Warmup = min(s.Train.Warmup, steps/10)
	s.Train.EvalEvery = steps
	for _, k := range []int{5, 4, 3, 2} {
		if steps%k == 0 {
			s.Train.EvalEvery = steps / k
			break
		}
	}
	// A checkpoint at every evaluation: the scheduler can move a plan off a node its
	// first epochs measured slow only by resuming from one.
	s.Checkpoint.Every = s.Train.EvalEvery
	return s
}

// testnetReporter prints what `testnet run` does (a testnet.Reporter): lines (text or
// JSON) and, on a terminal, a progress bar.
type testnetReporter struct {
	w, errw  io.Writer
	json     bool
	bar      *progressbar.ProgressBar
	step     int
	events   int
	lastLine time.Time
}

func newTestnetReporter(w, errw io.Writer, asJSON bool) *testnetReporter {
	return &testnetReporter{w: w, errw: errw, json: asJSON, step: -1}
}

// Info prints a line (a JSON info event with -o json).
func (r *testnetReporter) Info(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if r.json {
		writeJSONLine(r.w, map[string]string{"event": "info", "message": msg})
		return
	}
	if r.bar != nil {
		r.bar.Clear()
	}
	fmt.Fprintln(r.w, msg)
}

// Begin shows a progress bar of steps on a terminal.
func (r *testnetReporter) Begin(steps int) {
	if f, ok := r.w.(*os.File); ok && !r.json && term.IsTerminal(int(f.Fd())) {
		r.bar = progressbar.NewOptions(steps, progressbar.OptionSetWriter(r.w), progressbar.OptionSetDescription("training"),
			progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish())
	}
}

// End removes the progress bar.
func (r *testnetReporter) End() {
	if r.bar != nil {
		r.bar.Clear()
		r.bar = nil
	}
}

type progressJSON struct {
	Event        string   `json:"event"`
	Status       string   `json:"status"`
	Step         int      `json:"step"`
	Steps        int      `json:"steps"`
	Epoch        uint64   `json:"epoch"`
	Loss         float64  `json:"loss"`
	ValLoss      *float64 `json:"val_loss,omitempty"`
	TokensPerSec float64  `json:"tokens_per_sec"`
	BytesSent    uint64   `json:"bytes_sent"`
}

// Progress reports new job events, and the step when it changed.
func (r *testnetReporter) Progress(job records.JobDetail) {
	for ; r.events < len(job.Events); r.events++ {
		ev := job.Events[r.events]
		if r.json {
			writeJSONLine(r.w, map[string]any{"event": "job_event", "kind": ev.Kind, "epoch": ev.Epoch, "step": ev.Step, "message": ev.Message})
		} else {
			r.Info("event %s (epoch %d, step %d): %s", ev.Kind, ev.Epoch, ev.Step, ev.Message)
		}
	}
	p := job.Progress
	if p.Step == r.step {
		return
	}
	r.step = p.Step
	rec := progressJSON{Event: "progress", Status: string(job.Status), Step: p.Step, Steps: p.Steps, Epoch: p.Epoch,
		Loss: round6(p.Loss), TokensPerSec: round1(p.TokensPerSec), BytesSent: p.BytesSent}
	if n := len(p.Samples); n > 0 && p.Samples[n-1].ValLoss != nil {
		rec.ValLoss = ptr(round6(*p.Samples[n-1].ValLoss))
	}
	switch {
	case r.json:
		writeJSONLine(r.w, rec)
	case r.bar != nil:
		r.bar.Describe(fmt.Sprintf("training (loss %.3f, %.0f tok/s)", p.Loss, p.TokensPerSec))
		r.bar.Set(p.Step)
		if rec.ValLoss != nil {
			r.Info("step %d: val loss %.4f", p.Step, *rec.ValLoss)
		}
	case rec.ValLoss != nil || p.Step > 0 && time.Since(r.lastLine) >= 10*time.Second:
		line := fmt.Sprintf("step %d/%d  loss %.4f  %.0f tok/s", p.Step, p.Steps, p.Loss, p.TokensPerSec)
		if rec.ValLoss != nil {
			line += fmt.Sprintf("  val loss %.4f", *rec.ValLoss)
		}
		r.lastLine = time.Now()
		r.Info("%s", line)
	}
}

// summary prints the summary: the last line with -o json, a table for people.
func (r *testnetReporter) summary(s testnet.Summary) {
	r.End()
	if r.json {
		writeJSONLine(r.w, s)
		return
	}
	w := r.w
	fmt.Fprintf(w, "\njob %s: %s after %d steps (plan epoch %d, %s)\n", s.Job, s.Status, s.Steps, s.PlanEpoch, s.Strategy)
	fmt.Fprintf(w, "%-8s %-8s %-9s %-12s %-13s %-9s %-8s %s\n", "NODE", "REGION", "SLOWDOWN", "GEMM GFLOPS", "TRAIN GFLOPS", "MEMORY", "REPLICA", "LAYERS")
	for _, n := range s.Nodes {
		replica := "—"
		if n.Replica > 0 {
			replica = fmt.Sprint(n.Replica)
		}
		fmt.Fprintf(w, "%-8s %-8s %-9g %-12.1f %-13.1f %-9s %-8s %s\n", n.Name, n.Region, n.Slowdown, n.GemmGFLOPS, n.TrainGFLOPS,
			humanBytes(int64(n.MemoryBudgetBytes)), replica, testnet.LayerMap(n.Layers))
	}
	if s.Split != "" {
		fmt.Fprintf(w, "split            %s\n", s.Split)
	}
	if s.Reason != "" {
		fmt.Fprintf(w, "plan             %s\n", s.Reason)
	}
	fmt.Fprintf(w, "step time        %.3f s (predicted %.3f s)\n", s.StepTimeS, s.PredictedStepTimeS)
	for _, e := range s.Epochs {
		fmt.Fprintf(w, "  epoch %-2d       %.3f s measured (median of %d samples, %d steps), predicted %.3f s (host load %.2f cores)\n",
			e.Epoch, e.MeasuredStepS, e.Samples, e.Steps, e.PredictedStepS, e.HostLoad)
	}
	fmt.Fprintf(w, "throughput       %.0f tokens/s\n", s.TokensPerSec)
	fmt.Fprintf(w, "bytes per step   %s reported, %s on the emulated links (predicted %s)\n",
		humanBytes(int64(s.BytesPerStep)), humanBytes(int64(s.WireBytesPerStep)), humanBytes(int64(s.PredictedBytesPerStep)))
	fmt.Fprintf(w, "validation loss  %s → %s\n", fmtLoss(s.InitialValLoss), fmtLoss(s.FinalValLoss))
	for _, n := range s.Nodes {
		if p := n.Phases; p != nil {
			fmt.Fprintf(w, "phases %-9s compute %.3f s, transfer %.3f s, bubble %.3f s, sync %.3f s per step (epoch %d, %d steps to step %d)\n",
				n.Name, p.Compute, p.Transfer, p.Bubble, p.Sync, p.Epoch, p.Steps, p.Step)
		}
	}
}

func fmtLoss(v *float64) string {
	if v == nil {
		return "—"
	}
	return fmt.Sprintf("%.4f", *v)
}
