package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/testnet"
)

// compareOptions are the flags of `testnet run --compare`.
type compareOptions struct {
	on        bool
	budget    time.Duration
	wan       string
	variants  string
	plot      string
	evalEvery int
	repeat    int
	target    float64
	from      string
}

func addCompareFlags(cmd *cobra.Command, o *compareOptions) {
	f := cmd.Flags()
	f.BoolVar(&o.on, "compare", false, "time to loss: run the job once per variant (planner, sync, pipeline, diloco, streaming) on fresh testnets for --budget each and compare validation loss against wall time")
	f.DurationVar(&o.budget, "budget", 90*time.Second, "--compare: wall-clock budget per variant, from submit")
	f.StringVar(&o.wan, "wan", "", "links between regions as BANDWIDTH,LATENCY (e.g. 20mbit,80ms); default the topology's")
	f.StringVar(&o.variants, "variants", "planner,sync,pipeline,diloco,streaming", "--compare: the variants to run, in order")
	f.StringVar(&o.plot, "plot", "", "--compare: write the loss-against-time plot to this SVG file")
	f.IntVar(&o.evalEvery, "eval-every", 10, "--compare: evaluate every N steps")
	f.IntVar(&o.repeat, "repeat", 1, "--compare: rounds; each round runs every variant, in an order rotated by one")
	f.StringVar(&o.from, "from", "", "--compare: run nothing; report (table, curves, --plot) from earlier `-o json` outputs FILE[,FILE…], each file's rounds after the previous file's")
	f.Float64Var(&o.target, "target", 0, "--compare: target validation loss for the time-to-loss column (default: the highest of the runs' best losses)")
}

// check validates the compare flags; those that only --compare reads are refused without it.
func (o *compareOptions) check(cmd *cobra.Command) ([]testnet.Variant, error) {
	if !o.on {
		for _, name := range []string{"budget", "variants", "plot", "eval-every", "repeat", "target", "from"} {
			if cmd.Flags().Changed(name) {
				return nil, usagef("--%s: only with --compare", name)
			}
		}
		return nil, nil
	}
	switch {
	case o.budget < 10*time.Second || o.budget > 24*time.Hour:
		return nil, usagef("--budget: must be from 10s to 24h (got %s)", o.budget)
	case o.evalEvery < 1:
		return nil, usagef("--eval-every: must be ≥ 1 (got %d)", o.evalEvery)
	case o.repeat < 1 || o.repeat > 100:
		return nil, usagef("--repeat: must be from 1 to 100 (got %d)", o.repeat)
	case o.target < 0 || math.IsNaN(o.target) || math.IsInf(o.target, 0):
		return nil, usagef("--target: must be a loss > 0 (got %g)", o.target)
	}
	vs, err := testnet.VariantsByName(strings.Split(o.variants, ","))
	if err != nil {
		return nil, usagef("--variants: %v", err)
	}
	return vs, nil
}

// parseWAN reads --wan: "BANDWIDTH,LATENCY".
func parseWAN(s string) (testnet.LinkSpec, error) {
	bw, lat, ok := strings.Cut(s, ",")
	if !ok {
		return testnet.LinkSpec{}, usagef("--wan: want BANDWIDTH,LATENCY such as 100mbit,20ms (got %q)", s)
	}
	bw, lat = strings.TrimSpace(bw), strings.TrimSpace(lat)
	if _, err := testnet.ParseBandwidth(bw); err != nil {
		return testnet.LinkSpec{}, usagef("--wan: bandwidth: %v", err)
	}
	if d, err := time.ParseDuration(lat); err != nil || d < 0 {
		return testnet.LinkSpec{}, usagef("--wan: latency: want a duration ≥ 0 such as 20ms (got %q)", lat)
	}
	return testnet.LinkSpec{Latency: lat, Bandwidth: bw}, nil
}

// withWAN sets every link between two different regions of topo to wan.
func withWAN(topo testnet.Topology, wan testnet.LinkSpec) testnet.Topology {
	var regions []string
	seen := map[string]bool{}
	for _, n := range topo.Nodes {
		if !seen[n.Region] {
			seen[n.Region] = true
			regions = append(regions, n.Region)
		}
	}
	for i, a := range regions {
		for _, b := range regions[i+1:] {
			l := wan
			l.Between = []string{a, b}
			topo.Links = append(topo.Links, l)
		}
	}
	return topo
}

// compareSpec is the base job of a comparison: the job given, or the default job with a
// --steps schedule, evaluated every --eval-every steps, without checkpoints in the budget.
func (o *testnetRunOptions) compareSpec(cmd *cobra.Command, nodes int) (jobspec.Spec, error) {
	if o.job != "" {
		spec, err := o.spec(cmd)
		spec.Train.EvalEvery = o.cmp.evalEvery
		return spec, err
	}
	steps := o.steps
	if !cmd.Flags().Changed("steps") {
		steps = 1000
	}
	if steps < 1 {
		return jobspec.Spec{}, usagef("--steps: must be ≥ 1 (got %d)", steps)
	}
	spec := defaultTestnetJob(steps)
	spec.Train.EvalEvery = o.cmp.evalEvery
	spec.Placement.MinNodes = nodes
	return spec, nil
}

// runCompare runs every variant o.cmp.repeat times, each on a fresh testnet under dir,
// then prints the table and writes the plot.
func (o *testnetRunOptions) runCompare(cmd *cobra.Command, variants []testnet.Variant, spec jobspec.Spec, nodes int, dir string) error {
	rep := newTestnetReporter(cmd.OutOrStdout(), cmd.ErrOrStderr(), o.output == "json")
	wd, err := os.Getwd() // local data paths lie under the working directory, as with submit
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	var runs []testnet.Trial
	for round := range o.cmp.repeat {
		for i := range variants {
			v := variants[(i+round)%len(variants)]
			s := spec
			v.Apply(&s.Parallel)
			if err := s.Validate(); err != nil {
				return fmt.Errorf("variant %s: %w", v.Name, err)
			}
			cfg, err := o.topo.config(cmd, filepath.Join(dir, fmt.Sprintf("%s-%d", v.Name, round)))
			if err != nil {
				return err
			}
			if o.cmp.wan != "" {
				wan, _ := parseWAN(o.cmp.wan) // checked before
				cfg.Topology = withWAN(cfg.Topology, wan)
			}
			r, err := testnet.Compare(cmd.Context(), cfg, v.Name, round, s, wd, o.cmp.budget, rep)
			if err != nil {
				return fmt.Errorf("variant %s (round %d): %w", v.Name, round, err)
			}
			runs = append(runs, r)
		}
	}
	return o.reportCompare(rep, runs, nodes)
}

// loadCompareRuns reads the compare_run lines of earlier `-o json` outputs, numbering each
// file's rounds after the previous file's, and the first file's title and budget.
func loadCompareRuns(files string) (runs []testnet.Trial, title string, budget time.Duration, err error) {
	offset := 0
	for _, path := range strings.Split(files, ",") {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, "", 0, usagef("--from: %v", err)
		}
		rounds := 0
		for i, line := range strings.Split(string(b), "\n") {
			var ev struct {
				Event   string  `json:"event"`
				Title   string  `json:"title"`
				BudgetS float64 `json:"budget_s"`
				testnet.Trial
			}
			if strings.TrimSpace(line) == "" {
				continue
			}
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				return nil, "", 0, usagef("--from: %s:%d: %v", path, i+1, err)
			}
			switch ev.Event {
			case "compare_run":
				ev.Trial.Round += offset
				rounds = max(rounds, ev.Trial.Round-offset+1)
				runs = append(runs, ev.Trial)
			case "compare":
				if title == "" {
					title, budget = ev.Title, time.Duration(ev.BudgetS*float64(time.Second))
				}
			}
		}
		offset += rounds
	}
	if len(runs) == 0 || budget <= 0 {
		return nil, "", 0, usagef("--from: no compare runs in %s (want the -o json output of testnet run --compare)", files)
	}
	return runs, title, budget, nil
}

// reportCompare prints the runs (a table and each curve, or JSON lines) and writes the plot.
func (o *testnetRunOptions) reportCompare(rep *testnetReporter, runs []testnet.Trial, nodes int) error {
	wan := o.cmp.wan
	if wan == "" {
		wan = "topology default"
	}
	title := fmt.Sprintf("time to loss: %d nodes, WAN %s, budget %s", nodes, wan, o.cmp.budget)
	return o.printCompare(rep, runs, title, o.cmp.budget)
}

// printCompare prints the runs as reportCompare says and writes the plot.
func (o *testnetRunOptions) printCompare(rep *testnetReporter, runs []testnet.Trial, title string, budget time.Duration) error {
	target := o.cmp.target
	if target == 0 {
		target = testnet.CommonTarget(runs)
	}
	if o.cmp.plot != "" {
		if err := writePlotFile(o.cmp.plot, title, runs, budget.Seconds()); err != nil {
			return err
		}
	}
	if rep.json {
		for _, r := range runs {
			writeJSONLine(rep.w, struct {
				Event string `json:"event"`
				testnet.Trial
				TimeToTarget *float64 `json:"time_to_target_s"`
			}{"compare_run", r, finiteOrNil(r.TimeTo(target))})
		}
		writeJSONLine(rep.w, map[string]any{"event": "compare", "title": title, "target": finiteOrNil(target), "budget_s": budget.Seconds()})
		return nil
	}
	printCompareTable(rep.w, title, runs, target)
	return nil
}

func printCompareTable(w io.Writer, title string, runs []testnet.Trial, target float64) {
	fmt.Fprintf(w, "\n%s; target loss %s\n", title, fmtF(target, "%.4f"))
	fmt.Fprintf(w, "%-10s %-5s %-16s %-7s %-6s %-11s %-7s %s\n", "VARIANT", "ROUND", "PLAN", "S/STEP", "STEPS", "VAL@BUDGET", "BEST", "T→TARGET")
	for _, r := range runs {
		fmt.Fprintf(w, "%-10s %-5d %-16s %-7.3f %-6d %-11s %-7s %s\n", r.Variant, r.Round, r.Plan, r.StepTimeS, r.Steps,
			fmtF(r.FinalLoss(), "%.4f"), fmtF(r.BestLoss(), "%.4f"), fmtF(r.TimeTo(target), "%.0f s"))
	}
	fmt.Fprintln(w, "\nvalidation loss against wall time since submit:")
	for _, r := range runs {
		var pts []string
		for _, p := range r.Curve {
			pts = append(pts, fmt.Sprintf("%.0fs %.3f", p.T, p.Loss))
		}
		fmt.Fprintf(w, "%s#%d: %s\n", r.Variant, r.Round, strings.Join(pts, ", "))
	}
}

func writePlotFile(path, title string, runs []testnet.Trial, budgetS float64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	if err := testnet.WritePlot(f, title, runs, budgetS); err != nil {
		f.Close()
		return fmt.Errorf("--plot: %w", err)
	}
	return f.Close()
}

func fmtF(v float64, format string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return fmt.Sprintf(format, v)
}

func finiteOrNil(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}
