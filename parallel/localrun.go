package parallel

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/meshnode/meshnode/model"
)

// LocalRun runs every worker of a plan in this process, one goroutine per worker and step,
// over any Transport (the in-memory one, or real QUIC data planes on loopback). It is the
// engine's test harness and the distributed mode of `meshnode train`.
type LocalRun struct {
	rejected  []Rejection // every contribution a worker dropped, in step order
	offenders []string    // every member a worker named an offender, in step order
	byReplica map[int]*reports
	cfg       JobConfig
	workers   []*Worker
	trainTime time.Duration
	tokens    int
	audited   int // contributions the workers recomputed (StepResult.Audited)
}

// NewLocalRun builds the workers of plan; transport gives each node its endpoint.
func NewLocalRun(cfg JobConfig, plan Plan, data *model.Dataset, transport func(node string) Transport) (*LocalRun, error) {
	if err := plan.Validate(cfg.Train.Model.NumLayers()); err != nil {
		return nil, err
	}
	lr := &LocalRun{cfg: cfg}
	for _, stages := range plan.Replicas {
		for _, st := range stages {
			w, err := NewWorker(cfg, plan, st.Node, transport(st.Node), data)
			if err != nil {
				lr.Close()
				return nil, err
			}
			lr.workers = append(lr.workers, w)
		}
	}
	return lr, nil
}

// Close releases the workers' offload stores (stages with a memory budget).
func (l *LocalRun) Close() error {
	var errs []error
	for _, w := range l.workers {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// Rejected lists the contributions the workers dropped so far (step by step, in worker
// order): what a node would report as contribution_rejected events.
func (l *LocalRun) Rejected() []Rejection { return l.rejected }

// reports is what one replica's workers reported.
type reports struct {
	rejected  []Rejection
	offenders []string
}

// ReportedBy lists what replica r's workers dropped and named offenders so far: what an
// honest node would report, where Rejected and Offenders also hold a lying replica's.
func (l *LocalRun) ReportedBy(r int) ([]Rejection, []string) {
	if rep := l.byReplica[r]; rep != nil {
		return rep.rejected, rep.offenders
	}
	return nil, nil
}

// Offenders lists the members the workers named offenders so far (step by step, in
// worker order, once per worker): what a node would report as offender events.
func (l *LocalRun) Offenders() []string { return l.offenders }

// Audited is how many contributions the workers recomputed so far (audits).
func (l *LocalRun) Audited() int { return l.audited }

// Workers lists the run's workers, replica by replica, stage by stage.
func (l *LocalRun) Workers() []*Worker { return l.workers }

// parallelDo calls f for every worker selected by pick concurrently and returns the first
// error; the others are cancelled through ctx.
func (l *LocalRun) parallelDo(ctx context.Context, pick func(*Worker) bool, f func(context.Context, int, *Worker) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(l.workers))
	for i, w := range l.workers {
		if !pick(w) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = f(ctx, i, w); errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func all(*Worker) bool { return true }

// Step runs one step on every worker and returns the training loss: the mean over the
// replicas of each replica's loss, in replica order.
func (l *LocalRun) Step(ctx context.Context) (float64, error) {
	start := time.Now()
	results := make([]StepResult, len(l.workers))
	err := l.parallelDo(ctx, all, func(ctx context.Context, i int, w *Worker) error {
		var err error
		results[i], err = w.Step(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	l.trainTime += time.Since(start)
	for i, r := range results {
		l.audited += r.Audited
		l.rejected = append(l.rejected, r.Rejected...)
		l.offenders = append(l.offenders, r.Offenders...)
		if l.byReplica == nil {
			l.byReplica = map[int]*reports{}
		}
		rep := l.byReplica[l.workers[i].replica]
		if rep == nil {
			rep = &reports{}
			l.byReplica[l.workers[i].replica] = rep
		}
		rep.rejected = append(rep.rejected, r.Rejected...)
		rep.offenders = append(rep.offenders, r.Offenders...)
	}
	// The step's loss is the mean over every row of every replica.
	var loss float64
	rows := 0
	for i, w := range l.workers {
		if w.IsLast() {
			loss += results[i].Loss * float64(w.Batch())
			rows += w.Batch()
		}
	}
	l.tokens += rows * l.cfg.Train.Model.Context
	return loss / float64(rows), nil
}

// Evaluate returns replica 0's validation loss, computed through its pipeline.
func (l *LocalRun) Evaluate(ctx context.Context) (float64, error) {
	var loss float64
	err := l.parallelDo(ctx, func(w *Worker) bool { return w.Replica() == 0 }, func(ctx context.Context, _ int, w *Worker) error {
		v, ok, err := w.Evaluate(ctx)
		if ok {
			loss = v
		}
		return err
	})
	return loss, err
}

// BytesSent sums what the workers sent for the pipeline and for synchronisation.
func (l *LocalRun) BytesSent() (pipeline, sync int64) {
	for _, w := range l.workers {
		p, s := w.BytesSent()
		pipeline += p
		sync += s
	}
	return pipeline, sync
}

// StepsDone is the number of completed steps.
func (l *LocalRun) StepsDone() int { return l.workers[0].StepsDone() }

// Run trains to the end of the schedule (or stopAt), emitting events as Trainer.Run does,
// with the bytes sent added to evaluation and done events.
func (l *LocalRun) Run(ctx context.Context, stopAt int, emit func(Event)) error {
	err := TrainLoop(ctx, l, l.cfg.Train, stopAt, Hooks{
		Evaluate: func(ctx context.Context, step int, loss float64) error {
			ev, err := l.evaluated(ctx, Event{Kind: "step", Step: step, TrainLoss: loss})
			if err == nil {
				emit(ev)
			}
			return err
		},
		Progress: emitStep(emit),
	})
	if err != nil {
		return err
	}
	done, err := l.evaluated(ctx, Event{Kind: "done", Step: l.StepsDone()})
	if err != nil {
		return err
	}
	emit(done)
	return nil
}

// evaluated is ev with the validation loss, the throughput and the bytes sent so far.
func (l *LocalRun) evaluated(ctx context.Context, ev Event) (Event, error) {
	val, err := l.Evaluate(ctx)
	if err != nil {
		return ev, err
	}
	ev.ValLoss, ev.HasVal, ev.TokensPerSec, ev.HasBytes = val, true, l.tokensPerSec(), true
	ev.PipelineBytes, ev.SyncBytes = l.BytesSent()
	return ev, nil
}

func (l *LocalRun) tokensPerSec() float64 {
	if l.trainTime <= 0 {
		return 0
	}
	return float64(l.tokens) / l.trainTime.Seconds()
}
