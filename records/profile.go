package records

import (
	"fmt"
	"math"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Profile is what a node measured about itself, carried in every heartbeat. The balancer
// plans with these numbers, so they are measurements, never claims: package node fills
// them in.
type Profile struct {
	// GemmGFLOPS is the sustained float32 GEMM rate of the engine's own kernels at
	// GemmShape, already divided by Slowdown.
	GemmGFLOPS float64 `json:"gemm_gflops"`
	// GemmShape is the measured shape as "MxNxK".
	GemmShape string `json:"gemm_shape,omitempty"`
	// TrainGFLOPS is the effective rate of whole training steps (forward, backward and
	// AdamW of a reference GPT, counted with the model's cost model), already divided by
	// Slowdown: what the balancer plans compute time with. Zero means not measured.
	TrainGFLOPS float64 `json:"train_gflops,omitempty"`
	// TrainMicroGFLOPS is the same reference's rate when each pass computes one sequence
	// (128 tokens) instead of TrainGFLOPS's eight, as a pipeline of one-sequence
	// micro-batches runs: small passes cost more per FLOP (the balancer prices a stage's
	// micro-batch size with the two, balancer.Node.MicroEfficiency). Zero means not
	// measured.
	TrainMicroGFLOPS float64 `json:"train_micro_gflops,omitempty"`
	// TrainHostShare is the fraction of the host's cores the one-sequence training steps
	// kept busy, with the cores to themselves (CPU time over the steps' uncontended time
	// and the host's cores; the emulation's sleeps count as idle): what the node takes
	// from nodes that share its host while it computes (balancer.Node.HostShare). A
	// training step keeps its threads only partly busy (0.62 of 2 on the development
	// machine), and a slowed node less. Zero means not measured (priced as 1).
	TrainHostShare float64 `json:"train_host_share,omitempty"`
	// Slowdown is the emulated slowdown factor applied to compute (1 on real nodes).
	Slowdown float64 `json:"slowdown,omitempty"`
	// Cores is the number of logical CPUs the process may use.
	Cores int `json:"cores"`
	// MemoryTotalBytes and MemoryAvailableBytes describe host RAM at measurement time.
	MemoryTotalBytes     uint64 `json:"memory_total_bytes"`
	MemoryAvailableBytes uint64 `json:"memory_available_bytes"`
	// MemoryBudgetBytes is how much memory this node offers to training.
	MemoryBudgetBytes uint64 `json:"memory_budget_bytes"`
	// DiskFreeBytes is the free space in the node's data directory.
	DiskFreeBytes uint64 `json:"disk_free_bytes"`
	// DiskReadBps and DiskWriteBps are the measured sequential bandwidths of the data
	// directory in bytes/s (a bounded write, sync and read-back of a temporary file, the
	// page cache dropped in between), what offloaded training state moves at. Zero means
	// not measured: the balancer assumes a slow disk.
	DiskReadBps  float64 `json:"disk_read_bps,omitzero"`
	DiskWriteBps float64 `json:"disk_write_bps,omitzero"`
	// GPUs lists the devices NVML reported; empty (never null in JSON) without any.
	GPUs []GPU `json:"gpus"`
	// OS, Arch and Version identify the platform and the meshnode release.
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	Version string `json:"version"`
	// MeasuredAt is when the measurement finished.
	MeasuredAt time.Time `json:"measured_at"`
	// DataAddr is the UDP host:port where peers reach this node's tensor data plane (what
	// it advertises: on a testnet, the address of the WAN relay in front of it): the
	// first of DataAddrs, kept for readers that know one address only.
	DataAddr string `json:"data_addr,omitempty"`
	// DataAddrs are the candidate data-plane addresses, most preferred first: its
	// interface addresses, the addresses peers observe it at, loopback last; or only
	// --data-advertise. Peers try them in order and keep the first whose handshake proves
	// this node's identity. At most MaxDataAddrs, each valid for ValidDataAddr.
	DataAddrs []string `json:"data_addrs,omitempty"`
	// Region is an operator-given label of where the node is (a testnet's emulated region).
	Region string `json:"region,omitempty"`
	// Host identifies the machine the node runs on (a hash of its machine id and boot id,
	// never the ids themselves): nodes that announce the same Host share its cores, and the
	// balancer prices their concurrent compute as sharing them. Empty means unknown (the
	// node is taken to have its machine to itself).
	Host string `json:"host,omitempty"`
	// Links are this node's latest measurements of its paths to peers, so that every node,
	// and the leader planning a job, learns the whole link matrix from heartbeats.
	Links []ProfileLink `json:"links,omitempty"`
	// LocalData names the local datasets this node's operator exposed (--local-data
	// NAME=PATH), sorted: a job with data.local NAME is planned only on nodes listing NAME.
	// Names only: the paths stay on the node. At most MaxProfileLocalData.
	LocalData []string `json:"local_data,omitempty"`
}

// MaxProfileLocalData bounds how many local datasets one profile announces.
const MaxProfileLocalData = 32

// ProfileLink is one measured path from the announcing node to a peer.
type ProfileLink struct {
	Peer         string  `json:"peer"`
	RTTSeconds   float64 `json:"rtt_s"`
	BandwidthBps float64 `json:"bandwidth_bps"`
}

// GPU describes one device as NVML reports it.
type GPU struct {
	Index             int    `json:"index"`
	Name              string `json:"name"`
	UUID              string `json:"uuid,omitempty"`
	MemoryTotalBytes  uint64 `json:"memory_total_bytes"`
	MemoryFreeBytes   uint64 `json:"memory_free_bytes"`
	Multiprocessors   int    `json:"multiprocessors"`
	SMClockMHz        uint32 `json:"sm_clock_mhz"`
	MemoryClockMHz    uint32 `json:"memory_clock_mhz"`
	ComputeCapability string `json:"compute_capability,omitempty"`
}

// Limits on what a profile received from the network may hold.
const (
	maxProfileGPUs   = 64
	maxProfileString = 256
)

// Validate checks a profile received from the network: finite, non-negative numbers
// within physical bounds, bounded strings, GPU and link counts, parseable link peers.
func (p *Profile) Validate() error {
	if math.IsNaN(p.GemmGFLOPS) || math.IsInf(p.GemmGFLOPS, 0) || p.GemmGFLOPS < 0 {
		return fmt.Errorf("profile: gemm_gflops %v is not a rate", p.GemmGFLOPS)
	}
	if math.IsNaN(p.TrainGFLOPS) || math.IsInf(p.TrainGFLOPS, 0) || p.TrainGFLOPS < 0 {
		return fmt.Errorf("profile: train_gflops %v is not a rate", p.TrainGFLOPS)
	}
	if math.IsNaN(p.TrainMicroGFLOPS) || math.IsInf(p.TrainMicroGFLOPS, 0) || p.TrainMicroGFLOPS < 0 {
		return fmt.Errorf("profile: train_micro_gflops %v is not a rate", p.TrainMicroGFLOPS)
	}
	if math.IsNaN(p.TrainHostShare) || p.TrainHostShare < 0 || p.TrainHostShare > 1 {
		return fmt.Errorf("profile: train_host_share %v is not a share of the cores in [0, 1]", p.TrainHostShare)
	}
	if math.IsNaN(p.Slowdown) || math.IsInf(p.Slowdown, 0) || p.Slowdown < 0 {
		return fmt.Errorf("profile: slowdown %v is not a factor", p.Slowdown)
	}
	for name, r := range map[string]float64{"disk_read_bps": p.DiskReadBps, "disk_write_bps": p.DiskWriteBps} {
		if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
			return fmt.Errorf("profile: %s %v is not a rate", name, r)
		}
	}
	if p.Cores < 0 {
		return fmt.Errorf("profile: cores %d < 0", p.Cores)
	}
	if err := p.validateDataAddrs(); err != nil {
		return err
	}
	if len(p.GPUs) > maxProfileGPUs {
		return fmt.Errorf("profile: %d GPUs exceeds %d", len(p.GPUs), maxProfileGPUs)
	}
	strs := []string{p.GemmShape, p.OS, p.Arch, p.Version}
	for _, g := range p.GPUs {
		if g.Index < 0 || g.Multiprocessors < 0 {
			return fmt.Errorf("profile: GPU %d has negative fields", g.Index)
		}
		strs = append(strs, g.Name, g.UUID, g.ComputeCapability)
	}
	for _, s := range strs {
		if len(s) > maxProfileString {
			return fmt.Errorf("profile: a %d-byte string exceeds %d", len(s), maxProfileString)
		}
	}
	if err := p.validateLocalData(); err != nil {
		return err
	}
	return p.checkBounds() // profile_bounds.go
}

// validateLocalData checks the announced local dataset names: bounded in count, each a
// name data.local accepts (jobspec.LocalDataNamePattern), none twice.
func (p *Profile) validateLocalData() error {
	if len(p.LocalData) > MaxProfileLocalData {
		return fmt.Errorf("profile: local_data lists %d datasets, more than %d", len(p.LocalData), MaxProfileLocalData)
	}
	seen := map[string]bool{}
	for _, name := range p.LocalData {
		if !jobspec.LocalDataNamePattern.MatchString(name) || seen[name] {
			return fmt.Errorf("profile: local_data %.80q is not a dataset name, or is listed twice", name)
		}
		seen[name] = true
	}
	return nil
}

// Clone returns a deep copy of p.
func (p *Profile) Clone() *Profile {
	if p == nil {
		return nil
	}
	c := *p
	c.GPUs = append([]GPU{}, p.GPUs...)
	c.Links = append([]ProfileLink(nil), p.Links...)
	c.DataAddrs = append([]string(nil), p.DataAddrs...)
	c.LocalData = append([]string(nil), p.LocalData...)
	return &c
}
