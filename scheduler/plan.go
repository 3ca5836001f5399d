package scheduler

import (
	"fmt"
	"slices"
	"sort"

	"github.com/meshnode/meshnode/balancer"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// Stage is one pipeline stage of a plan: layers [First, Last) on Node, the engine's own
// stage type.
type Stage = parallel.StagePlan

// JobPlan is what the leader commits for a job epoch: where every layer runs (the engine's
// plan, with per-replica batch shares and micro-batch count) and what the balancer
// predicted. Its JSON is the `plan` of GET /v1/jobs/{id}.
type JobPlan struct {
	Replicas       [][]Stage        `json:"replicas"`
	Batches        []int            `json:"batches,omitempty"`
	MicroBatches   int              `json:"micro_batches"`
	Strategy       jobspec.Strategy `json:"strategy"`
	PredictedStepS float64          `json:"predicted_step_s"`
	Reason         string           `json:"reason"`
	// ResumeStep is the checkpoint step the epoch starts from (0: from the initial weights).
	ResumeStep int `json:"resume_step"`
	// Continues says the epoch carries on the previous one in place: the previous plan
	// without the replicas that lost a node (DiLoCo and streaming, whose outer steps run by
	// quorum), or the same plan with a recalibrated prediction. The workers keep their
	// state and step on, restoring nothing; ResumeStep is then 0 (replicas lost) or the
	// previous epoch's (recalibrated), and nothing restores from it.
	Continues bool `json:"continues,omitempty"`
	// Built is the epoch whose plan the running workers were built with, set on an epoch
	// that continues another: their frames carry it, and a node that rejoins builds its
	// worker from that plan (BuiltPlan). Slots are, replica by replica, the index each of
	// this plan's replicas has there, and Dropped the replicas of that plan this epoch runs
	// without.
	Built   uint64           `json:"built,omitempty"`
	Slots   []int            `json:"slots,omitempty"`
	Dropped []DroppedReplica `json:"dropped,omitempty"`
	// Rejoin are the nodes of a continuing epoch that come back into it (they had been
	// dropped): each copies its stage's state from a live replica at an outer-step
	// boundary instead of restoring a checkpoint, and the others keep training.
	Rejoin []string `json:"rejoin,omitempty"`
	// DataShards are, for a sharded dataset (data.train_shards > 0), the training shards
	// each replica trains on, by index in the dataset's manifest: model.ReplicaShards of
	// the replica count at planning. Every node of replica r fetches shards DataShards[r]
	// and nothing else of the training split. nil: the dataset is one blob.
	DataShards [][]int `json:"data_shards,omitempty"`
	// PredictedGFLOPS are the node speeds PredictedStepS was predicted with where they are
	// not the inputs' (an in-place epoch that recalibrated the prediction of the same plan,
	// calibration.go); nil: the inputs' snapshot.
	PredictedGFLOPS map[string]float64 `json:"predicted_gflops,omitempty"`
	// Inputs are what the balancer planned from: the measured nodes and links, the job's
	// costs and the options. Planning is a pure function, so anyone can re-derive the plan.
	Inputs PlanInputs `json:"inputs"`
	// Audited is the balancer's Plan.Audited: the engine audits the epoch's gathers. For a
	// job with parallel.audit "auto" it decides whether the workers audit (AuditRate); a
	// pinned rate is the job's alone.
	Audited bool `json:"audited,omitempty"`
}

// AuditRate is the parallel.audit rate the workers of plan p of a job with spec s run
// with: the spec's resolved rate (jobspec.Spec.ResolvedAudit), except that "auto" audits
// only a plan the balancer found auditable (Audited). Every member, and a leader judging
// evidence, reads it from the same committed plan.
func AuditRate(s jobspec.Spec, p JobPlan) float64 {
	if s.Parallel.Audit.IsAuto && !p.Audited {
		return 0
	}
	return s.ResolvedAudit()
}

// PlanInputs are the balancer's inputs of a committed plan.
type PlanInputs struct {
	Snapshot balancer.Snapshot `json:"snapshot"`
	Job      balancer.Job      `json:"job"`
	Strategy jobspec.Strategy  `json:"strategy"`
	// MaxReplicas is the job's fixed replica count, 0 when the balancer chooses.
	MaxReplicas int `json:"max_replicas,omitempty"`
	// Stages is the job's fixed stage count per replica, 0 when the balancer chooses.
	Stages int `json:"stages,omitempty"`
}

// Replan runs the balancer again on the recorded inputs.
func (in PlanInputs) Replan() (balancer.Plan, error) {
	return balancer.NewPlan(in.Snapshot, in.Job, in.options())
}

// options are the balancer options the inputs record.
func (in PlanInputs) options() balancer.Options {
	return balancer.Options{Strategy: in.Strategy, MaxReplicas: in.MaxReplicas, Stages: in.Stages}
}

// Nodes lists the plan's nodes, replica by replica, stage by stage.
func (p JobPlan) Nodes() []string {
	var out []string
	for _, r := range p.Replicas {
		for _, s := range r {
			out = append(out, s.Node)
		}
	}
	return out
}

// Has reports whether node runs a stage of the plan.
func (p JobPlan) Has(node string) bool {
	for _, id := range p.Nodes() {
		if id == node {
			return true
		}
	}
	return false
}

// ModelConfig is the job's model shape.
func ModelConfig(spec jobspec.Spec) model.Config { return model.Config(spec.Model) }

// candidate is a member the balancer may plan on.
type candidate struct {
	id      string
	profile *Profile
}

// candidates are the members that are alive and announced a usable profile, in the order
// the state lists them.
func candidates(members []Member) []candidate {
	var out []candidate
	for _, m := range members {
		if m.State == MemberAlive && m.Profile != nil {
			out = append(out, candidate{id: m.ID, profile: m.Profile})
		}
	}
	return out
}

// withLocalData is the candidates that expose the local dataset name (all of them when
// name is empty: the job's data travels as a blob); an error naming data.local when none
// does.
func withLocalData(cands []candidate, name string) ([]candidate, error) {
	if name == "" {
		return cands, nil
	}
	var out []candidate
	for _, c := range cands {
		if slices.Contains(c.profile.LocalData, name) {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("data.local: no live node exposes a local dataset %q (its operator exposes one with meshnode join --local-data %s=PATH)", name, name)
	}
	return out, nil
}

// planInputs builds the balancer's inputs for spec from the candidates, pricing links with
// what the candidates measured (their profiles' Links) and the sync traffic with the
// codec's compression ratio.
func planInputs(spec jobspec.Spec, cands []candidate, compression func(jobspec.Codec) float64) (PlanInputs, error) {
	return planInputsKeeping(spec, cands, nil, compression)
}

// planInputsKeeping is planInputs that, where the spec bounds the nodes (max_nodes, fixed
// stages × replicas), keeps the nodes of keep before faster ones: growth weighs a running
// plan against one with the joined nodes, and a plan node cut for a spare calibrated
// faster made the running plan infeasible, which moved the job from a checkpoint without
// the balancer's hysteresis (CI's spare-rebuild scenario, once the first epoch was
// calibrated a few seconds in).
func planInputsKeeping(spec jobspec.Spec, cands []candidate, keep map[string]bool, compression func(jobspec.Codec) float64) (PlanInputs, error) {
	cands, err := withLocalData(cands, spec.Data.Local)
	if err != nil {
		return PlanInputs{}, err
	}
	sort.Slice(cands, func(i, j int) bool {
		if keep[cands[i].id] != keep[cands[j].id] {
			return keep[cands[i].id]
		}
		return cands[i].profile.GFLOPS > cands[j].profile.GFLOPS
	})
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
	cfg := ModelConfig(spec)
	ratio := 1.0
	if compression != nil {
		ratio = compression(spec.Parallel.Codec)
	}
	job := balancer.Job{
		Layers: cfg.LayerCosts(), Batch: spec.Train.Batch, Context: cfg.Context,
		MicroBatches: microBatches(spec.Train.MicroBatches), Schedule: spec.Parallel.Schedule,
		Sync: balancer.Sync{Mode: spec.Parallel.Sync, InnerSteps: spec.Parallel.InnerSteps,
			Compression: ratio, Fragments: spec.Parallel.Fragments,
			Audit: spec.ResolvedAudit(), AuditAuto: spec.Parallel.Audit.IsAuto},
		Recompute: recompute(spec.Memory.Recompute),
		Zero:      spec.Memory.Zero,
		Offload:   offload(spec.Memory.Offload),
	}
	in := PlanInputs{Snapshot: snapshot(cands), Job: job, Strategy: spec.Placement.Strategy}
	if !spec.Parallel.Replicas.IsAuto {
		in.MaxReplicas = spec.Parallel.Replicas.N
	}
	if !spec.Parallel.Stages.IsAuto {
		in.Stages = spec.Parallel.Stages.N
	}
	if spec.Data.Local != "" {
		// Each replica trains on one node's own data: a pipeline would read inputs on one
		// node and targets on another, from different corpora.
		in.Stages = 1
	}
	if spec.Model.TiedHead() {
		// No offload store: it pins the token table only with the embedding, not the
		// head's view of it (model/tied.go).
		in.Job.Offload = jobspec.OffloadOff
	}
	return in, nil
}

// microBatches is the balancer's micro-batch count for the spec's: 0 (the balancer
// searches the counts, trading micro-batch size for memory on a small or shrinking mesh)
// for "auto", else the pinned count.
func microBatches(m jobspec.AutoInt) int {
	if m.IsAuto {
		return 0
	}
	return m.N
}

// recompute is the balancer's recomputation choice for the spec's: a spec stored before
// memory.recompute existed ("") plans without recomputation, as it did then.
func recompute(r jobspec.Recompute) jobspec.Recompute {
	if r == "" {
		return jobspec.RecomputeOff
	}
	return r
}

// offload is the balancer's offload choice for the spec's: a spec stored before
// memory.offload existed ("") plans without offload, as it did then.
func offload(o jobspec.Offload) jobspec.Offload {
	if o == "" {
		return jobspec.OffloadOff
	}
	return o
}

// snapshot is the balancer's view of the candidates: their speeds and memory, and the
// links they measured towards each other.
func snapshot(cands []candidate) balancer.Snapshot {
	var snap balancer.Snapshot
	known := map[string]bool{}
	for _, c := range cands {
		known[c.id] = true
	}
	for _, c := range cands {
		snap.Nodes = append(snap.Nodes, balancer.Node{ID: c.id, GFLOPS: c.profile.GFLOPS, MemoryBytes: c.profile.MemoryBytes,
			DiskReadBps: c.profile.DiskReadBps, DiskWriteBps: c.profile.DiskWriteBps, DiskFreeBytes: c.profile.DiskFreeBytes,
			Host: c.profile.Host, HostShare: c.profile.HostShare, HostLoad: c.profile.HostLoad, MicroEfficiency: c.profile.MicroEfficiency})
		for _, l := range c.profile.Links {
			if known[l.Peer] && l.BandwidthBps > 0 {
				snap.Links = append(snap.Links, balancer.Link{From: c.id, To: l.Peer, RTT: l.RTTSeconds, Bandwidth: l.BandwidthBps})
			}
		}
	}
	return snap
}

// PlanJob asks the balancer for a plan of spec on the live members with usable profiles,
// priced and checked as cfg says (Config.Compression, Config.CheckPlan).
func PlanJob(spec jobspec.Spec, members []Member, cfg Config) (JobPlan, error) {
	in, err := planInputs(spec, candidates(members), cfg.Compression)
	if err != nil {
		return JobPlan{}, err
	}
	bp, err := in.Replan()
	if err != nil {
		return JobPlan{}, err
	}
	jp, err := jobPlanFrom(bp, in, ModelConfig(spec).NumLayers(), cfg.CheckPlan)
	if err == nil {
		jp.DataShards = dataShards(spec.Data.TrainShards, len(jp.Replicas))
	}
	return jp, err
}

// dataShards assigns n training shards to R replicas (model.ReplicaShards); nil when the
// dataset is not sharded.
func dataShards(n, R int) [][]int {
	if n <= 0 {
		return nil
	}
	out := make([][]int, R)
	for r := range out {
		out[r] = model.ReplicaShards(n, r, R)
	}
	return out
}

// jobPlanFrom turns a balancer plan into the plan the leader commits, checked by check
// (nil: not checked).
func jobPlanFrom(bp balancer.Plan, in PlanInputs, numLayers int, check func(JobPlan, int) error) (JobPlan, error) {
	jp := JobPlan{MicroBatches: bp.MicroBatches, Strategy: bp.Strategy, PredictedStepS: bp.Predicted.Step, Reason: bp.Reason, Inputs: in, Audited: bp.Audited}
	for _, r := range bp.Replicas {
		var stages []Stage
		for _, s := range r.Stages {
			stages = append(stages, Stage{Node: s.Node, First: s.First, Last: s.Last, Recompute: s.Recompute, MemoryBudget: s.MemoryBudget})
		}
		jp.Replicas = append(jp.Replicas, stages)
		jp.Batches = append(jp.Batches, r.Batch)
	}
	if jp.MicroBatches < 1 {
		jp.MicroBatches = 1
	}
	if check == nil {
		return jp, nil
	}
	return jp, check(jp, numLayers)
}
