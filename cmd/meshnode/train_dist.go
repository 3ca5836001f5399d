package main

import (
	"context"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/dataplane"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// distOptions are train's flags for running a plan of pipeline stages and data-parallel
// replicas inside one process, each worker with its own endpoint: the engine end to end
// without consensus.
type distOptions struct {
	stages, replicas int
	schedule         string
	syncMode         string
	codec            string
	aggregate        string
	score            string
	transport        string
	// outerLR and outerMomentum are "auto" or a number, resolved by validate.
	outerLR, outerMomentum string
	// pipeline and sync are the flags parsed by validate.
	pipeline jobspec.Schedule
	sync     parallel.SyncConfig
}

func (d *distOptions) addFlags(cmd *cobra.Command) {
	d.sync = parallel.DefaultSyncConfig()
	f := cmd.Flags()
	f.IntVar(&d.stages, "stages", 1, "pipeline stages per replica (each a worker with its own data plane)")
	f.IntVar(&d.replicas, "replicas", 1, "data-parallel replicas, each with --batch sequences per step")
	f.StringVar(&d.schedule, "schedule", string(jobspec.Schedule1F1B), "pipeline schedule: 1f1b or gpipe")
	f.StringVar(&d.syncMode, "sync", string(jobspec.SyncDiLoCo), "replica synchronisation: sync (gradients every step), diloco or streaming (DiLoCo per fragment of layers, staggered and overlapped)")
	f.IntVar(&d.sync.InnerSteps, "inner-steps", d.sync.InnerSteps, "DiLoCo: local steps between synchronisations")
	f.StringVar(&d.outerLR, "outer-lr", "auto", "DiLoCo: outer Nesterov learning rate, or auto (chosen by the number of outer steps, --steps ÷ --inner-steps)")
	f.StringVar(&d.outerMomentum, "outer-momentum", "auto", "DiLoCo: outer Nesterov momentum, or auto (chosen with --outer-lr's auto)")
	f.IntVar(&d.sync.Fragments, "fragments", d.sync.Fragments, "streaming: fragments of layers synchronised in turn (1 to the model's layers and to --inner-steps)")
	f.IntVar(&d.sync.Overlap, "overlap", d.sync.Overlap, "streaming: inner steps a fragment's all-reduce overlaps before its update is applied (< --inner-steps)")
	f.Float64Var(&d.sync.MixLocal, "mix-local", d.sync.MixLocal, "streaming with overlap: share of the replica's own weights kept when an update arrives, in [0, 1)")
	f.StringVar(&d.codec, "codec", string(jobspec.CodecNone), "compression of replica traffic: none, fp16, int8 or topk (with error feedback)")
	f.StringVar(&d.score, "score", string(jobspec.ScoreAuto), "score each contribution on a held-out batch and drop those that do not lower its loss: auto (DiLoCo's outer steps), on (every sync) or off")
	f.StringVar(&d.aggregate, "aggregate", string(jobspec.AggregateMean), "how replicas combine contributions after dropping non-finite, outsized or outlying ones: mean, trimmed, median or centered_clip")
	f.Float64Var(&d.sync.TopKFraction, "topk-fraction", d.sync.TopKFraction, "topk codec: share of elements sent")
	f.Float64Var(&d.sync.Audit, "audit", 0, "members of each gather drawn, on average, to have their work recomputed by every other replica (0: none; needs --sync diloco or sync and a codec other than topk, sent without error feedback)")
	f.IntVar(&d.sync.Zero, "zero", 0, "ZeRO sharding across replicas in --sync sync: 1 shards the AdamW moments, 2 also the reduced gradients (same losses)")
	f.StringVar(&d.transport, "transport", "quic", "worker links: quic (real data planes on loopback) or memory")
}

func (d *distOptions) distributed() bool { return d.stages > 1 || d.replicas > 1 }

// validate checks the distributed flags; the run's own recipe is checked by the caller.
func (d *distOptions) validate(cmd *cobra.Command, o *trainOptions) error {
	if L := o.cfg.Model.NumLayers(); d.stages < 1 || d.stages > L {
		return usagef("--stages must be between 1 and the %d layers of the model (embedding, %d blocks, head), got %d", L, o.cfg.Model.Layers, d.stages)
	}
	if d.replicas < 1 {
		return usagef("--replicas must be ≥ 1 (got %d)", d.replicas)
	}
	for _, name := range []string{"out", "resume", "stop-at", "checkpoint-every", "init"} {
		if cmd.Flags().Changed(name) {
			return usagef("--%s works with single-process training only: drop --stages/--replicas, or run the job on a mesh (meshnode submit), whose stages checkpoint every checkpoint.every steps and resume by themselves", name)
		}
	}
	var err error
	if d.pipeline, err = jobspec.ParseSchedule("--schedule", d.schedule); err != nil {
		return usageError{err: err}
	}
	if d.sync.Mode, err = jobspec.ParseSync("--sync", d.syncMode); err != nil {
		return usageError{err: err}
	}
	if d.sync.Codec, err = jobspec.ParseCodec("--codec", d.codec); err != nil {
		return usageError{err: err}
	}
	if d.sync.Aggregate, err = jobspec.ParseAggregate("--aggregate", d.aggregate); err != nil {
		return usageError{err: err}
	}
	if d.sync.Score, err = jobspec.ParseScore("--score", d.score); err != nil {
		return usageError{err: err}
	}
	if err := d.checkZero(); err != nil {
		return err
	}
	if err := d.resolveOuter(o.cfg.Steps); err != nil {
		return err
	}
	if d.sync.Mode == jobspec.SyncStreaming {
		f := d.sync.Fragments
		if f == 0 {
			f = 1 // as the engine reads it
		}
		if err := jobspec.CheckFragments(f, o.cfg.Model.Layers, d.sync.InnerSteps, trainFlagNames); err != nil {
			return usageError{err: err}
		}
	}
	if err := d.sync.CheckAudit("--audit", "--sync", "--codec", "--zero"); err != nil {
		return usageError{err: err}
	}
	if err := d.sync.Validate(); err != nil {
		return usageError{err: err}
	}
	if d.transport != "quic" && d.transport != "memory" {
		return usagef("--transport must be quic or memory (got %q)", d.transport)
	}
	return nil
}

// checkZero reports a --zero that is not 0, 1 or 2, or given with DiLoCo or a codec, as
// one usage error naming the flag (the job spec's rule, jobspec.CheckZero).
func (d *distOptions) checkZero() error {
	if err := jobspec.CheckZero(d.sync.Zero, d.sync.Mode, d.sync.Codec, trainFlagNames); err != nil {
		return usageError{err: err}
	}
	return nil
}

// trainFlagNames spell the sync settings in train's errors as its flags.
var trainFlagNames = jobspec.Names{Zero: "--zero", Sync: "--sync", Codec: "--codec", Fragments: "--fragments",
	InnerSteps: "--inner-steps", Layers: "--layers", Is: " "}

// resolveOuter sets the outer step from --outer-lr and --outer-momentum: a number as
// given, auto as jobspec.AutoOuter chooses for the run's outer steps.
func (d *distOptions) resolveOuter(steps int) error {
	lr, err := jobspec.ParseAutoFloat("--outer-lr", d.outerLR)
	if err == nil {
		err = lr.CheckOuterLR("--outer-lr")
	}
	if err != nil {
		return usageError{err: err}
	}
	m, err := jobspec.ParseAutoFloat("--outer-momentum", d.outerMomentum)
	if err == nil {
		err = m.CheckOuterMomentum("--outer-momentum")
	}
	if err != nil {
		return usageError{err: err}
	}
	d.sync.OuterLR, d.sync.OuterMomentum = jobspec.ResolveOuter(lr, m, steps, d.sync.InnerSteps)
	return nil
}

// run trains the plan: replicas × stages workers, layers cut evenly.
func (d *distOptions) run(ctx context.Context, w io.Writer, o *trainOptions, data *model.Dataset) error {
	endpoints, names, closeAll, err := d.endpoints(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	nodes := make([][]string, d.replicas)
	for r := range nodes {
		nodes[r] = names[r*d.stages : (r+1)*d.stages]
	}
	cfg := parallel.JobConfig{Train: o.cfg, Schedule: d.pipeline, Sync: d.sync, Job: 1}
	plan := parallel.EvenPlan(o.cfg.Model.NumLayers(), nodes...)
	for r := range plan.Replicas { // the plan is the one road of --recompute and --memory-budget
		for s := range plan.Replicas[r] {
			plan.Replicas[r][s].Recompute = o.cfg.Recompute
			if r == 0 { // --memory-budget (one replica): each stage's own
				plan.Replicas[r][s].MemoryBudget = o.cfg.MemoryBudget
			}
		}
	}
	run, err := parallel.NewLocalRun(cfg, plan, data,
		func(n string) parallel.Transport { return endpoints[n] })
	if err != nil {
		return usagef("%v", err)
	}
	defer run.Close()
	rep := newTrainReporter(w, o.output == "json", o.cfg.Steps, 0)
	if err := run.Run(ctx, 0, rep.event); err != nil {
		return fmt.Errorf("training stopped at step %d: %w", run.StepsDone(), err)
	}
	return nil
}

// endpoints creates one transport per worker: QUIC data planes on 127.0.0.1 with fresh
// identities that know each other's addresses, or an in-memory network.
func (d *distOptions) endpoints(ctx context.Context) (map[string]parallel.Transport, []string, func(), error) {
	n := d.stages * d.replicas
	eps := map[string]parallel.Transport{}
	if d.transport == "memory" {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("worker-%d", i)
		}
		net := parallel.NewInMemory(names...)
		for _, name := range names {
			eps[name] = net.Peer(name)
		}
		return eps, names, net.Close, nil
	}
	var planes []*dataplane.Plane
	closeAll := func() {
		for _, p := range planes {
			p.Close()
		}
	}
	names := make([]string, 0, n)
	for i := 0; i < n; i++ {
		key, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		cfg := dataplane.DefaultConfig()
		cfg.ListenAddr, cfg.Identity = "127.0.0.1:0", key
		p, err := dataplane.New(ctx, cfg)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		planes = append(planes, p)
		names = append(names, p.Self())
		eps[p.Self()] = p
	}
	for _, p := range planes {
		for _, q := range planes {
			if p != q {
				p.SetPeerAddr(q.Self(), q.Addr())
			}
		}
	}
	return eps, names, closeAll, nil
}
