package parallel

import (
	"slices"
	"testing"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// replanning is the harness's leader acting on a conviction as the scheduler acts on an
// offender (scheduler.supervise): a new plan of the replicas left, the job's batch split
// again over them (the balancer's batch shares, as even as the count allows: the nodes are
// alike), every worker restarted in the next epoch from the newest checkpoint. Checkpoints
// are taken as the runner takes them (node/runner's training.checkpoint: the first step at
// or after each multiple of every where the replicas agree), of the honest replicas
// [0, honest) alone; none yet means a restart from step 0.
type replanning struct {
	every, honest int
	global        int // the job's batch over all replicas
	at            int // the newest checkpoint's step
	weights       *model.TensorFile
	moments       map[int]*model.TensorFile
}

// newReplanning is the leader for run, whose first honest replicas are honest, with a
// checkpoint every every steps.
func newReplanning(run *LocalRun, every, honest int) *replanning {
	_, _, global := run.workers[0].plan.replicaBatch(0, run.cfg.Train.Batch)
	return &replanning{every: every, honest: honest, global: global}
}

// checkpoint takes a checkpoint of run after a step where one is due.
func (p *replanning) checkpoint(t *testing.T, run *LocalRun) {
	t.Helper()
	step := run.StepsDone()
	if p.every <= 0 || step/p.every <= p.at/p.every || !run.workers[0].Consistent() || step >= run.cfg.Train.Steps {
		return
	}
	p.at, p.weights, p.moments = step, &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}, map[int]*model.TensorFile{}
	for _, w := range run.workers {
		if w.Replica() >= p.honest {
			continue
		}
		s, err := w.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range s.Model {
			p.weights.Tensors[k] = v
		}
		m := p.moments[s.Replica]
		if m == nil {
			m = &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
			p.moments[s.Replica] = m
		}
		for k, v := range s.Optimizer {
			m.Tensors[k] = v
		}
		m.Metadata = s.OptimizerMeta
	}
}

// without replaces run's workers by those of the next plan, without the replicas that
// hold any of nodes, restored from the newest checkpoint (a replica that wrote none takes
// replica 0's optimizer state, as the runner serves any replica's files to a replica
// without its own). The run keeps what its workers reported.
func (p *replanning) without(t *testing.T, run *LocalRun, nodes ...string) {
	t.Helper()
	var next Plan
	for _, stages := range run.workers[0].plan.Replicas {
		if !slices.ContainsFunc(stages, func(s StagePlan) bool { return slices.Contains(nodes, s.Node) }) {
			next.Replicas = append(next.Replicas, stages)
		}
	}
	R := len(next.Replicas)
	for r := range R {
		share := p.global / R
		if r < p.global%R {
			share++
		}
		next.Batches = append(next.Batches, share)
	}
	transports := map[string]Transport{}
	for _, w := range run.workers {
		transports[w.Self()] = w.rawTransport()
		w.Close()
	}
	for r, stages := range next.Replicas {
		if m, ok := transports[stages[0].Node].(interface{ moved(int) }); ok {
			m.moved(r) // an attacker's transport that needs its place in the group
		}
	}
	cfg := run.cfg
	cfg.Epoch++
	fresh, err := NewLocalRun(cfg, next, run.workers[0].data, func(node string) Transport { return transports[node] })
	if err != nil {
		t.Fatal(err)
	}
	if p.at > 0 {
		for _, w := range fresh.workers {
			m := p.moments[w.Replica()]
			if m == nil {
				m = p.moments[0]
			}
			if err := w.Restore(p.weights, m, p.at); err != nil {
				t.Fatal(err)
			}
		}
	}
	run.workers, run.cfg = fresh.workers, cfg
}
