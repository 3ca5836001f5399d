package balancer

import (
	"fmt"
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// Node is one machine as the mesh measured it.
type Node struct {
	// ID is the node's peer ID; plans name nodes by it.
	ID string `json:"id"`
	// GFLOPS is the node's measured compute speed in GFLOP/s, counted with the model's
	// cost model (must be > 0): the node measures whole training steps of a reference model
	// (mesh.Profile.TrainGFLOPS), so stage times come out as the engine runs them, or its
	// GEMM rate where it measured no training.
	GFLOPS float64 `json:"gflops"`
	// MemoryBytes is the memory the node lends to training (must be > 0).
	MemoryBytes int64 `json:"memory_bytes"`
	// GPU, when present, is the accelerator the node trains on: its speed and memory replace
	// GFLOPS and MemoryBytes where they are set (> 0).
	GPU *GPU `json:"gpu,omitempty"`
	// DiskReadBps and DiskWriteBps are the measured bandwidths of the node's data directory
	// in bytes/s (mesh.Profile), what offloaded training state moves at; 0 means not
	// measured (DefaultDiskReadBps, DefaultDiskWriteBps).
	DiskReadBps  float64 `json:"disk_read_bps,omitempty"`
	DiskWriteBps float64 `json:"disk_write_bps,omitempty"`
	// DiskFreeBytes is the free space of the node's data directory it announced
	// (mesh.Profile.DiskFreeBytes). A stage offloads on the node only if its whole training
	// state (the offload store's file holds every chunk) fits jobspec.OffloadDiskRoom of it.
	// Nil: not known, no bound (simulations); the scheduler always sets it.
	DiskFreeBytes *uint64 `json:"disk_free_bytes,omitempty"`
	// Host names the machine the node runs on (records.Profile.Host): nodes of one host
	// share its cores, and a plan's step is priced with the share each gets while the
	// others compute (colocation.go). Empty: the node has its machine to itself.
	Host string `json:"host,omitempty"`
	// HostShare is the fraction of its host's cores the node keeps busy while it computes,
	// in (0, 1]: 1/k for a testnet node whose emulated slowdown k sleeps the rest of its
	// kernels' time. 0 means 1.
	HostShare float64 `json:"host_share,omitempty"`
	// HostLoad is the load other programs put on the node's host while it computes, in
	// host cores: 1/share − 1 for a host where a compute-bound thread got share of a core
	// (colocation.go adds it to the node's load). 0 means none (a machine to itself);
	// negative and non-finite values count as 0.
	HostLoad float64 `json:"host_load,omitempty"`
	// MicroEfficiency is the node's training rate on micro-batches of SmallMicroTokens
	// tokens over its rate on micro-batches of LargeMicroTokens, GFLOPS (micro.go), in
	// (0, 1]: what a pipeline of one-sequence micro-batches computes at. 0 (not measured),
	// values above 1 and non-finite values mean 1; ignored for a GPU with its own speed.
	MicroEfficiency float64 `json:"micro_efficiency,omitempty"`
}

// microEfficiency is MicroEfficiency where it applies, else 1.
func (n Node) microEfficiency() float64 {
	e := n.MicroEfficiency
	if !(e > 0) || e >= 1 || (n.GPU != nil && n.GPU.GFLOPS > 0) {
		return 1
	}
	return e
}

// diskRoom is how many bytes of offloaded training state the node's disk may take, +Inf
// where its free space is not known.
func (n Node) diskRoom() float64 {
	if n.DiskFreeBytes == nil {
		return math.Inf(1)
	}
	return float64(jobspec.OffloadDiskRoom(*n.DiskFreeBytes))
}

// disk returns the node's disk read and write bandwidth, the defaults where unmeasured.
func (n Node) disk() (read, write float64, err error) {
	read, write = n.DiskReadBps, n.DiskWriteBps
	if !(read >= 0) || !(write >= 0) || math.IsInf(read, 0) || math.IsInf(write, 0) {
		return 0, 0, fmt.Errorf("node %q: disk_read_bps and disk_write_bps must be finite and ≥ 0 (got %g, %g)", n.ID, read, write)
	}
	if read == 0 {
		read = DefaultDiskReadBps
	}
	if write == 0 {
		write = DefaultDiskWriteBps
	}
	return read, write, nil
}

// GPU is an accelerator found through NVML and measured like the CPU.
type GPU struct {
	Name string `json:"name"`
	// GFLOPS is the measured GEMM speed on the GPU; 0 means not measured (the node's own
	// GFLOPS is used).
	GFLOPS float64 `json:"gflops,omitempty"`
	// MemoryBytes is the device memory; 0 means unknown (the node's MemoryBytes is used).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// speed returns the node's effective FLOP/s and memory budget in bytes.
func (n Node) capability() (flops, mem float64) {
	flops, mem = n.GFLOPS*1e9, float64(n.MemoryBytes)
	if n.GPU != nil {
		if n.GPU.GFLOPS > 0 {
			flops = n.GPU.GFLOPS * 1e9
		}
		if n.GPU.MemoryBytes > 0 {
			mem = float64(n.GPU.MemoryBytes)
		}
	}
	return flops, mem
}

// Link is the measured path from one node to another. Links are directed: the path back is
// its own Link.
type Link struct {
	From string `json:"from"`
	To   string `json:"to"`
	// RTT is the measured round-trip time in seconds; a message takes RTT/2 plus its
	// serialisation time.
	RTT float64 `json:"rtt_seconds"`
	// Bandwidth is the measured throughput in bytes per second (must be > 0).
	Bandwidth float64 `json:"bandwidth_bytes_per_second"`
}

// Snapshot is the read-only view a plan is computed from. Pairs with no Link are priced as
// badly as the worst measured link (or 100 Mbit/s and 100 ms when none was measured).
type Snapshot struct {
	Nodes []Node `json:"nodes"`
	Links []Link `json:"links"`
}

// Sync is the job's replica synchronisation.
type Sync struct {
	// Mode is jobspec.SyncDiLoCo, jobspec.SyncStreaming or jobspec.SyncEveryStep; "" means
	// SyncDiLoCo.
	Mode jobspec.Sync `json:"mode"`
	// InnerSteps is the number of local steps between DiLoCo syncs; 0 means 100. Ignored by
	// jobspec.SyncEveryStep.
	InnerSteps int `json:"inner_steps"`
	// Compression is the codec's size ratio (4 for int8 from float32); 0 means 1.
	Compression float64 `json:"compression"`
	// Fragments is SyncStreaming's number of sync events per outer period (≤ the layers);
	// 0 means 1. Other modes ignore it.
	Fragments int `json:"fragments"`
	// Audit is the job's parallel.audit: how many members of each gather are drawn, on
	// average, for every other member to recompute their work; 0 for none. It is priced
	// only where the engine audits: a plan of two or more replicas, each one stage held
	// whole in memory (audit.go).
	Audit float64 `json:"audit,omitempty"`
	// AuditAuto is parallel.audit "auto": the plan is chosen as if unaudited, then audited
	// at rate Audit when its replicas are each one stage held whole in memory and every
	// node also holds its audit worker (Plan.Audited); otherwise it runs unaudited. A job
	// that pins Audit instead prefers audited plans and fails where its audit workers do
	// not fit.
	AuditAuto bool `json:"audit_auto,omitempty"`
}

// Job is what is being trained: the model's per-layer costs and the batch shape.
type Job struct {
	// Layers are the model's layer costs in order (model.Config.LayerCosts); ≥ 1.
	Layers []model.LayerCost `json:"layers"`
	// Batch is the number of sequences per optimizer step, over all replicas; ≥ 1.
	Batch int `json:"batch"`
	// Context is the number of tokens per sequence; ≥ 1.
	Context int `json:"context"`
	// MicroBatches is the number of micro-batches per replica; 0 lets the strategy choose
	// (even and sky use one sequence per micro-batch).
	MicroBatches int `json:"micro_batches"`
	// Schedule is the pipeline schedule; "" means jobspec.Schedule1F1B.
	Schedule jobspec.Schedule `json:"schedule"`
	// Sync is how replicas synchronise.
	Sync Sync `json:"sync"`
	// Recompute is whether stages may recompute activations; "" means RecomputeOff.
	Recompute jobspec.Recompute `json:"recompute,omitempty"`
	// Zero is the ZeRO stage (0, 1 or 2) of a Sync.Mode jobspec.SyncEveryStep job: each of R
	// replicas keeps 1/R of the AdamW moments. It needs uncompressed sync (Compression 0 or
	// 1); a plan of one replica runs without it.
	Zero int `json:"zero,omitempty"`
	// Offload is whether stages may keep training state on disk; "" means OffloadOff.
	Offload jobspec.Offload `json:"offload,omitempty"`
}

// Limits of jobspec.StrategyOptimal.
const (
	OptimalMaxNodes  = 6
	OptimalMaxLayers = 16
)

// Options tune planning.
type Options struct {
	// Strategy is the algorithm; "" means jobspec.StrategyAuto.
	Strategy jobspec.Strategy
	// MaxReplicas bounds the number of replicas auto may form; 0 means no bound.
	MaxReplicas int
	// Stages is the job's fixed number of pipeline stages per replica (parallel.stages);
	// 0 means auto chooses. Auto then keeps only plans whose every replica has exactly
	// that many stages when any exists, else those with the most stages below it (fewer
	// nodes can hold the model than asked for), and says so in the plan's Reason.
	Stages int
	// Margin is Replan's hysteresis: a new plan must be predicted faster by this fraction,
	// after the cost of moving layers; 0 means 0.10.
	Margin float64
	// MoveHorizonSteps is the number of steps over which Replan amortises the time to move
	// layers; 0 means 100.
	MoveHorizonSteps int
}

// Plan is where every layer runs and what that is predicted to cost per step.
type Plan struct {
	Strategy jobspec.Strategy `json:"strategy"`
	// Replicas each hold the whole model as an ordered list of stages.
	Replicas []Replica `json:"replicas"`
	// MicroBatches is the micro-batch count per replica (a replica with a smaller batch uses
	// one micro-batch per sequence).
	MicroBatches int              `json:"micro_batches"`
	Schedule     jobspec.Schedule `json:"schedule"`
	// Predicted is the planner's own estimate of one step.
	Predicted Breakdown `json:"predicted"`
	// LinkBytes is the predicted traffic per step on each directed link that carries any,
	// activations plus amortised sync, sorted by From then To.
	LinkBytes []LinkLoad `json:"link_bytes"`
	// Reason says which constraint bound the plan.
	Reason string `json:"reason"`
	// Audited says the engine audits the plan's gathers at the job's Sync.Audit rate: set
	// for every plan it audits, and what decides it for a Sync.AuditAuto job.
	Audited bool `json:"audited,omitempty"`
}

// Replica is one pipeline holding every layer once.
type Replica struct {
	// Batch is the number of sequences this replica processes per step.
	Batch  int     `json:"batch"`
	Stages []Stage `json:"stages"`
}

// Stage is a contiguous layer range [First, Last) on one node.
type Stage struct {
	Node  string `json:"node"`
	First int    `json:"first"`
	Last  int    `json:"last"`
	// MemoryBytes is the predicted peak memory of the stage under the plan's schedule.
	MemoryBytes float64 `json:"memory_bytes"`
	// Recompute says whether the stage recomputes its layers' activations in the backward
	// pass (priced in the plan's memory and step time).
	Recompute bool `json:"recompute,omitempty"`
	// OffloadBytes is the stage's training state (weights, gradients, AdamW moments) kept
	// on disk rather than in memory, its I/O priced in the step time; 0: all resident.
	OffloadBytes int64 `json:"offload_bytes,omitempty"`
	// MemoryBudget is the resident training-state bytes the engine's store may hold when
	// the stage offloads (parallel.StagePlan.MemoryBudget); 0 when all of it is resident.
	MemoryBudget int64 `json:"memory_budget,omitempty"`
	// Zero is the ZeRO stage the stage's replicas shard their optimizer state with (0: none).
	Zero int `json:"zero,omitempty"`
}

// Breakdown splits a step time in seconds.
type Breakdown struct {
	Step float64 `json:"step_s"`
	// Compute is the busiest stage's compute over all its micro-batches.
	Compute float64 `json:"compute_s"`
	// Transfer is time the pipeline waits on links: activation latency and serialisation
	// during fill and drain, and any excess of a link or of a 1F1B round trip over compute.
	Transfer float64 `json:"transfer_s"`
	// Bubble is the rest of the pipeline phase: fill and drain of compute.
	Bubble float64 `json:"bubble_s"`
	// Sync is the replica synchronisation, amortised per step.
	Sync float64 `json:"sync_s"`
	// Audit is the expected time per step the replica spends recomputing other members'
	// work (Sync.Audit), amortised per step; included in Step.
	Audit float64 `json:"audit_s,omitempty"`
}

// LinkLoad is the bytes per step on one directed link.
type LinkLoad struct {
	From  string  `json:"from"`
	To    string  `json:"to"`
	Bytes float64 `json:"bytes"`
}
