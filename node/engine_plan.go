package node

import (
	"fmt"
	"sort"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// JobPlan is what the leader commits for a job epoch: where every layer runs (the engine's
// plan, with per-replica batch shares and micro-batch count) and what the balancer
// predicted. Its JSON is the `plan` of GET /v1/jobs/{id}.
type JobPlan struct {
	Replicas       [][]parallel.StagePlan `json:"replicas"`
	Batches        []int                  `json:"batches,omitempty"`
	MicroBatches   int                    `json:"micro_batches"`
	Strategy       string                 `json:"strategy"`
	PredictedStepS float64                `json:"predicted_step_s"`
	Reason         string                 `json:"reason"`
	// ResumeStep is the checkpoint step the epoch starts from (0: from the initial weights).
	ResumeStep int `json:"resume_step"`
	// Inputs are what the balancer planned from: the measured nodes and links, the job's
	// costs and the options. Planning is a pure function, so anyone can re-derive the plan.
	Inputs PlanInputs `json:"inputs"`
}

// PlanInputs are the balancer's inputs of a committed plan.
type PlanInputs struct {
	Snapshot balancer.Snapshot `json:"snapshot"`
	Job      balancer.Job      `json:"job"`
	Strategy balancer.Strategy `json:"strategy"`
	// MaxReplicas is the job's fixed replica count, 0 when the balancer chooses.
	MaxReplicas int `json:"max_replicas,omitempty"`
}

// Replan runs the balancer again on the recorded inputs.
func (in PlanInputs) Replan() (balancer.Plan, error) {
	return balancer.NewPlan(in.Snapshot, in.Job, in.options())
}

// Engine is the plan the workers run.
func (p JobPlan) Engine() parallel.Plan {
	return parallel.Plan{Replicas: p.Replicas, Batches: p.Batches}
}

// Nodes lists the plan's nodes.
func (p JobPlan) Nodes() []string {
	var out []string
	for _, r := range p.Replicas {
		for _, s := range r {
			out = append(out, s.Node)
		}
	}
	return out
}

// planCandidate is a node the balancer may use, with what it measured.
type planCandidate struct {
	id      string
	profile *mesh.Profile
}

// modelConfig is the job's model shape.
func modelConfig(spec jobspec.Spec) model.Config {
	m := spec.Model
	return model.Config{Layers: m.Layers, DModel: m.DModel, Heads: m.Heads, Context: m.Context, Vocab: m.Vocab}
}

// codecCompression is the size ratio of a codec against float32, for the balancer's
// sync-cost estimate.
func codecCompression(codec string) float64 {
	switch codec {
	case jobspec.CodecFP16:
		return 2
	case jobspec.CodecInt8:
		return 4 / (1 + 4.0/float64(parallel.Int8Block))
	case jobspec.CodecTopK:
		return 1 / (2 * parallel.DefaultSyncConfig().TopKFraction)
	}
	return 1
}

// planInputs builds the balancer's inputs for spec from the candidates, pricing links with
// what the candidates measured (their profiles' Links).
func planInputs(spec jobspec.Spec, cands []planCandidate) (PlanInputs, error) {
	sort.Slice(cands, func(i, j int) bool { return ComputeGFLOPS(cands[i].profile) > ComputeGFLOPS(cands[j].profile) })
	if max := spec.Placement.MaxNodes; max > 0 && len(cands) > max {
		cands = cands[:max]
	}
	if !spec.Parallel.Stages.IsAuto && !spec.Parallel.Replicas.IsAuto {
		if want := spec.Parallel.Stages.N * spec.Parallel.Replicas.N; len(cands) > want {
			cands = cands[:want]
		}
	}
	if len(cands) < max(1, spec.Placement.MinNodes) {
		return PlanInputs{}, fmt.Errorf("placement.min_nodes: %d nodes can run the job, it asks for at least %d", len(cands), spec.Placement.MinNodes)
	}
	var snap balancer.Snapshot
	known := map[string]bool{}
	for _, c := range cands {
		known[c.id] = true
	}
	for _, c := range cands {
		snap.Nodes = append(snap.Nodes, balancer.Node{ID: c.id, GFLOPS: ComputeGFLOPS(c.profile), MemoryBytes: int64(c.profile.MemoryBudgetBytes)})
		for _, l := range c.profile.Links {
			if known[l.Peer] && l.BandwidthBps > 0 {
				snap.Links = append(snap.Links, balancer.Link{From: c.id, To: l.Peer, RTT: l.RTTSeconds, Bandwidth: l.BandwidthBps})
			}
		}
	}
	cfg := modelConfig(spec)
	job := balancer.Job{
		Layers: cfg.LayerCosts(), Batch: spec.Train.Batch, Context: cfg.Context,
		MicroBatches: spec.Train.MicroBatches, Schedule: balancer.Schedule(spec.Parallel.Schedule),
		Sync: balancer.Sync{Mode: balancer.SyncMode(spec.Parallel.Sync), InnerSteps: spec.Parallel.InnerSteps,
			Compression: codecCompression(spec.Parallel.Codec)},
	}
	in := PlanInputs{Snapshot: snap, Job: job, Strategy: balancer.Strategy(spec.Placement.Strategy)}
	if !spec.Parallel.Replicas.IsAuto {
		in.MaxReplicas = spec.Parallel.Replicas.N
	}
	return in, nil
}

// options are the balancer options the inputs record.
func (in PlanInputs) options() balancer.Options {
	return balancer.Options{Strategy: in.Strategy, MaxReplicas: in.MaxReplicas}
}

// planJob asks the balancer for a plan of spec on the candidates.
func planJob(spec jobspec.Spec, cands []planCandidate) (JobPlan, error) {
	in, err := planInputs(spec, cands)
	if err != nil {
		return JobPlan{}, err
	}
	bp, err := in.Replan()
	if err != nil {
		return JobPlan{}, err
	}
	return jobPlanFrom(bp, in, modelConfig(spec).NumLayers())
}

// jobPlanFrom turns a balancer plan into the plan the leader commits.
func jobPlanFrom(bp balancer.Plan, in PlanInputs, numLayers int) (JobPlan, error) {
	jp := JobPlan{MicroBatches: bp.MicroBatches, Strategy: string(bp.Strategy), PredictedStepS: bp.Predicted.Step, Reason: bp.Reason, Inputs: in}
	for _, r := range bp.Replicas {
		var stages []parallel.StagePlan
		for _, s := range r.Stages {
			stages = append(stages, parallel.StagePlan{Node: s.Node, First: s.First, Last: s.Last})
		}
		jp.Replicas = append(jp.Replicas, stages)
		jp.Batches = append(jp.Batches, r.Batch)
	}
	if jp.MicroBatches < 1 {
		jp.MicroBatches = 1
	}
	return jp, jp.Engine().Validate(numLayers)
}
