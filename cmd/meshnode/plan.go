package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

type planOptions struct {
	simulate  bool
	scenario  string
	seed      uint64
	nodesFile string
	linksFile string
	modelFile string
	model     model.Config
	job       balancer.Job
	strategy  string
	output    string
}

func newPlanCmd() *cobra.Command {
	o := &planOptions{model: model.DefaultConfig(), job: balancer.Job{Batch: 64}}
	cmd := &cobra.Command{
		Use:   "plan --simulate",
		Short: "Plan where layers run on a mesh and simulate one training step",
		Long: `Plan cuts the model into pipeline stages over a set of nodes and links, groups nodes into
replicas, and judges each plan with a discrete-event simulation of one training step. The
nodes come from a generated scenario (sky64: 64 unequal nodes on a uniform 10 Gbit/s network;
geo3: 12 GPU nodes in three regions joined by 100 Mbit/s, 80 ms links) or from JSON files:
--nodes holds [{"id","gflops","memory_bytes","disk_read_bps","disk_write_bps"}] (disk rates
optional), --links holds
[{"from","to","rtt_seconds","bandwidth_bytes_per_second"}]; pairs without a link are priced
like the worst measured one. Strategies: even (equal layer counts), sky (compute balanced
under memory, links ignored), optimal (exhaustive, ≤ 6 nodes and ≤ 16 layers), auto
(meshnode's), or all. Each stage says whether it recomputes activations, how many bytes of
its training state it offloads to disk, and its ZeRO stage. See docs/balancer.md.`,
		Example: `  meshnode plan --simulate --scenario geo3 --seed 1
  meshnode plan --simulate --scenario sky64 --strategy all -o json
  meshnode plan --simulate --nodes nodes.json --links links.json --model model.yaml --batch 32`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.BoolVar(&o.simulate, "simulate", false, "plan offline over a scenario or files and simulate (required: live planning runs on the leader)")
	f.StringVar(&o.scenario, "scenario", "", "generated scenario: sky64 or geo3")
	f.Uint64Var(&o.seed, "seed", 1, "scenario seed")
	f.StringVar(&o.nodesFile, "nodes", "", "JSON file of nodes (instead of --scenario)")
	f.StringVar(&o.linksFile, "links", "", "JSON file of directed links (with --nodes)")
	f.StringVar(&o.modelFile, "model", "", "YAML file of the model (layers, d_model, heads, context, vocab)")
	f.IntVar(&o.model.Layers, "layers", o.model.Layers, "transformer blocks")
	f.IntVar(&o.model.DModel, "d-model", o.model.DModel, "embedding width")
	f.IntVar(&o.model.Heads, "heads", o.model.Heads, "attention heads")
	f.IntVar(&o.model.Context, "context", o.model.Context, "sequence length in tokens")
	f.IntVar(&o.model.Vocab, "vocab", o.model.Vocab, "vocabulary size")
	f.IntVar(&o.job.Batch, "batch", o.job.Batch, "sequences per optimizer step, all replicas together")
	f.IntVar(&o.job.MicroBatches, "micro-batches", 0, "micro-batches per replica; 0: the planner chooses")
	f.StringVar((*string)(&o.job.Schedule), "schedule", string(jobspec.Schedule1F1B), "pipeline schedule: 1f1b or gpipe")
	f.StringVar((*string)(&o.job.Sync.Mode), "sync", string(jobspec.SyncDiLoCo), "replica sync: diloco or sync (every step)")
	f.IntVar(&o.job.Sync.InnerSteps, "inner-steps", 100, "steps between DiLoCo syncs")
	f.Float64Var(&o.job.Sync.Compression, "compression", 4, "sync codec size ratio (4: int8, 1: none)")
	f.StringVar((*string)(&o.job.Recompute), "recompute", string(jobspec.RecomputeAuto), "activation recomputation: auto (only when nothing fits without), on or off")
	f.StringVar((*string)(&o.job.Offload), "offload", string(jobspec.OffloadAuto), "training state on disk: auto (only when nothing fits otherwise, after recomputation), on (wherever priced faster) or off")
	f.IntVar(&o.job.Zero, "zero", 0, "ZeRO stage across replicas: 0, 1 or 2 (needs --sync sync and --compression 1)")
	f.StringVar(&o.strategy, "strategy", "all", "auto, sky, even, optimal or all")
	addOutputFlag(cmd, &o.output)
	return cmd
}

// planReport is the JSON form of one run.
type planReport struct {
	Scenario string       `json:"scenario"`
	Seed     *uint64      `json:"seed,omitempty"`
	Nodes    int          `json:"nodes"`
	Layers   int          `json:"layers"`
	Batch    int          `json:"batch"`
	Plans    []planResult `json:"plans"`
}

type planResult struct {
	Strategy       string              `json:"strategy"`
	SimulatedStep  float64             `json:"simulated_step_s,omitempty"`
	PredictedStep  float64             `json:"predicted_step_s,omitempty"`
	RatioToEven    float64             `json:"ratio_to_even,omitempty"`
	Replicas       [][]planStage       `json:"replicas,omitempty"`
	ReplicaBatches []int               `json:"replica_batches,omitempty"`
	MicroBatches   int                 `json:"micro_batches,omitempty"`
	Predicted      *balancer.Breakdown `json:"predicted,omitempty"`
	Reason         string              `json:"reason,omitempty"`
	Error          string              `json:"error,omitempty"`
}

type planStage struct {
	Node   string `json:"node"`
	Layers [2]int `json:"layers"`
	// Recompute says whether the stage recomputes activations in the backward pass.
	Recompute bool `json:"recompute"`
	// OffloadBytes is the training state the stage keeps on disk; MemoryBudget the
	// resident training state its store may hold then (0 without offload).
	OffloadBytes int64 `json:"offload_bytes"`
	MemoryBudget int64 `json:"memory_budget,omitempty"`
	// Zero is the ZeRO stage of the stage's replicas (0: none).
	Zero int `json:"zero"`
	// MemoryBytes is the predicted resident peak.
	MemoryBytes int64 `json:"memory_bytes"`
}

func (o *planOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	if !o.simulate {
		return usagef("plan: --simulate is required: live plans are made by the mesh leader; use --simulate with --scenario or --nodes for a what-if")
	}
	strategies, err := parseStrategies(o.strategy)
	if err != nil {
		return err
	}
	snap, job, report, err := o.inputs(cmd)
	if err != nil {
		return err
	}
	for _, s := range strategies {
		report.Plans = append(report.Plans, planAndSimulate(snap, job, s))
	}
	evenStep := 0.0
	if even, err := balancer.NewPlan(snap, job, balancer.Options{Strategy: jobspec.StrategyEven}); err == nil {
		if sim, err := balancer.Simulate(snap, job, even); err == nil {
			evenStep = sim.Step
		}
	}
	failed := 0
	for i := range report.Plans {
		p := &report.Plans[i]
		if p.Error != "" {
			failed++
		} else if evenStep > 0 {
			p.RatioToEven = round6(p.SimulatedStep / evenStep)
		}
	}
	if o.output == "json" {
		writeJSONLine(cmd.OutOrStdout(), report)
	} else {
		writePlanText(cmd.OutOrStdout(), report, job)
	}
	if failed == len(report.Plans) {
		return fmt.Errorf("plan: no strategy found a feasible plan: %s", report.Plans[0].Error)
	}
	return nil
}

func parseStrategies(s string) ([]jobspec.Strategy, error) {
	if s == "all" {
		return []jobspec.Strategy{jobspec.StrategyEven, jobspec.StrategySky, jobspec.StrategyAuto, jobspec.StrategyOptimal}, nil
	}
	if st := jobspec.Strategy(s); st.Valid() {
		return []jobspec.Strategy{st}, nil
	}
	return nil, usagef("--strategy: must be auto, sky, even, optimal or all (got %q)", s)
}

// inputs builds the snapshot and job from a scenario or from files, with model and job flags
// the user set overriding the scenario's.
func (o *planOptions) inputs(cmd *cobra.Command) (balancer.Snapshot, balancer.Job, planReport, error) {
	var snap balancer.Snapshot
	var report planReport
	flags := cmd.Flags()
	switch {
	case o.scenario != "" && o.nodesFile != "":
		return snap, o.job, report, usagef("--scenario and --nodes are alternatives: give one")
	case o.scenario != "":
		if o.linksFile != "" {
			return snap, o.job, report, usagef("--links goes with --nodes, not --scenario")
		}
		sc, err := balancer.NewScenario(o.scenario, o.seed)
		if err != nil {
			return snap, o.job, report, usagef("--scenario: %v", err)
		}
		snap = sc.Snapshot
		report.Scenario, report.Seed = sc.Name, ptr(o.seed)
		o.overrideModel(flags.Changed, sc.Model)
		o.overrideJob(flags.Changed, sc.Job)
	case o.nodesFile != "":
		if err := readJSONFile(o.nodesFile, &snap.Nodes); err != nil {
			return snap, o.job, report, usagef("--nodes: %v", err)
		}
		if o.linksFile != "" {
			if err := readJSONFile(o.linksFile, &snap.Links); err != nil {
				return snap, o.job, report, usagef("--links: %v", err)
			}
		}
		report.Scenario = o.nodesFile
	default:
		return snap, o.job, report, usagef("plan: give --scenario sky64|geo3 or --nodes nodes.json")
	}
	if o.modelFile != "" {
		if err := o.readModel(flags.Changed); err != nil {
			return snap, o.job, report, err
		}
	}
	if err := o.model.Validate(); err != nil {
		return snap, o.job, report, usagef("model: %v", err)
	}
	job := o.job
	job.Layers, job.Context = o.model.LayerCosts(), o.model.Context
	if err := checkMemoryFlags(job); err != nil {
		return snap, job, report, err
	}
	if err := job.Validate(); err != nil {
		return snap, job, report, usagef("%v", err)
	}
	report.Nodes, report.Layers, report.Batch = len(snap.Nodes), len(job.Layers), job.Batch
	return snap, job, report, nil
}

// overrideModel takes the scenario's model except where a model flag was set.
func (o *planOptions) overrideModel(changed func(string) bool, m model.Config) {
	set := func(flag string, dst *int, v int) {
		if !changed(flag) {
			*dst = v
		}
	}
	set("layers", &o.model.Layers, m.Layers)
	set("d-model", &o.model.DModel, m.DModel)
	set("heads", &o.model.Heads, m.Heads)
	set("context", &o.model.Context, m.Context)
	set("vocab", &o.model.Vocab, m.Vocab)
}

func (o *planOptions) overrideJob(changed func(string) bool, j balancer.Job) {
	if !changed("batch") {
		o.job.Batch = j.Batch
	}
	if !changed("micro-batches") {
		o.job.MicroBatches = j.MicroBatches
	}
	if !changed("schedule") {
		o.job.Schedule = j.Schedule
	}
	if !changed("sync") {
		o.job.Sync.Mode = j.Sync.Mode
	}
	if !changed("inner-steps") {
		o.job.Sync.InnerSteps = j.Sync.InnerSteps
	}
	if !changed("compression") {
		o.job.Sync.Compression = j.Sync.Compression
	}
}

// readModel reads --model; model flags set on the command line still win.
func (o *planOptions) readModel(changed func(string) bool) error {
	b, err := os.ReadFile(o.modelFile)
	if err != nil {
		return usagef("--model: %v", err)
	}
	var m model.Config
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return usagef("--model %s: %v", o.modelFile, err)
	}
	if m.Vocab == 0 {
		m.Vocab = model.DefaultConfig().Vocab
	}
	o.overrideModel(changed, m)
	return nil
}

func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func planAndSimulate(snap balancer.Snapshot, job balancer.Job, s jobspec.Strategy) planResult {
	res := planResult{Strategy: string(s)}
	var sim balancer.Simulation
	p, err := balancer.NewPlan(snap, job, balancer.Options{Strategy: s})
	if err == nil {
		sim, err = balancer.Simulate(snap, job, p)
	}
	if err != nil {
		var ie *balancer.InfeasibleError
		if !errors.As(err, &ie) {
			err = fmt.Errorf("%s: %w", s, err)
		}
		res.Error = err.Error()
		return res
	}
	res.SimulatedStep, res.PredictedStep = round6(sim.Step), round6(p.Predicted.Step)
	res.MicroBatches, res.Reason, res.Predicted = p.MicroBatches, p.Reason, &p.Predicted
	for _, r := range p.Replicas {
		var stages []planStage
		for _, st := range r.Stages {
			stages = append(stages, planStage{Node: st.Node, Layers: [2]int{st.First, st.Last}, Recompute: st.Recompute,
				OffloadBytes: st.OffloadBytes, MemoryBudget: st.MemoryBudget, Zero: st.Zero, MemoryBytes: int64(st.MemoryBytes)})
		}
		res.Replicas = append(res.Replicas, stages)
		res.ReplicaBatches = append(res.ReplicaBatches, r.Batch)
	}
	return res
}

func writePlanText(w io.Writer, r planReport, job balancer.Job) {
	seed := ""
	if r.Seed != nil {
		seed = fmt.Sprintf(" (seed %d)", *r.Seed)
	}
	fmt.Fprintf(w, "%s%s: %d nodes, %d layers, batch %d, %s, sync %s\n\n", r.Scenario, seed, r.Nodes, r.Layers, r.Batch,
		orDefault(string(job.Schedule), "1f1b"), orDefault(string(job.Sync.Mode), "diloco"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STRATEGY\tSIMULATED\tPREDICTED\tVS EVEN\tREPLICAS\tSTAGES\tMICRO-BATCHES")
	for _, p := range r.Plans {
		if p.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\n", p.Strategy)
			continue
		}
		stages := 0
		for _, rep := range p.Replicas {
			stages += len(rep)
		}
		ratio := "-"
		if p.RatioToEven > 0 {
			ratio = fmt.Sprintf("%.3f", p.RatioToEven)
		}
		fmt.Fprintf(tw, "%s\t%.4g s\t%.4g s\t%s\t%d\t%d\t%d\n", p.Strategy, p.SimulatedStep, p.PredictedStep, ratio, len(p.Replicas), stages, p.MicroBatches)
	}
	tw.Flush()
	for _, p := range r.Plans {
		fmt.Fprintf(w, "\n%s:", p.Strategy)
		if p.Error != "" {
			fmt.Fprintf(w, " no plan: %s\n", p.Error)
			continue
		}
		fmt.Fprintf(w, " %s\n", p.Reason)
		for i, rep := range p.Replicas {
			head := fmt.Sprintf("  replica %d (batch %d):", i, p.ReplicaBatches[i])
			fmt.Fprint(w, head)
			col := len(head)
			for _, st := range rep {
				cell := fmt.Sprintf(" %s[%d,%d)", st.Node, st.Layers[0], st.Layers[1])
				cell += stageSuffix(st)
				if col+len(cell) > 96 {
					fmt.Fprint(w, "\n   ")
					col = 3
				}
				fmt.Fprint(w, cell)
				col += len(cell)
			}
			fmt.Fprintln(w)
		}
	}
}

// stageSuffix marks what a stage does to fit: +recompute, +offload <size>, +zero<n>.
func stageSuffix(st planStage) string {
	out := ""
	if st.Recompute {
		out += "+recompute"
	}
	if st.OffloadBytes > 0 {
		out += "+offload " + strings.ReplaceAll(humanBytes(uint64(st.OffloadBytes)), " ", "")
	}
	if st.Zero > 0 {
		out += fmt.Sprintf("+zero%d", st.Zero)
	}
	return out
}

// checkMemoryFlags names the flag of a memory setting that cannot be planned.
func checkMemoryFlags(job balancer.Job) error {
	if err := job.Recompute.Check("--recompute"); err != nil {
		return usagef("%v", err)
	}
	if err := job.Offload.Check("--offload"); err != nil {
		return usagef("%v", err)
	}
	switch z := job.Zero; {
	case z < 0 || z > 2:
		return usagef("--zero: must be 0, 1 or 2, got %d", z)
	case z > 0 && job.Sync.Mode != jobspec.SyncEveryStep:
		return usagef("--zero: %d shards what replicas synchronise every step: it needs --sync %s, got %q", z, jobspec.SyncEveryStep, job.Sync.Mode)
	case z > 0 && job.Sync.Compression > 1:
		return usagef("--zero: %d reduces shards uncompressed: it needs --compression 1, got %g", z, job.Sync.Compression)
	}
	return nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
