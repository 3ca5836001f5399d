package fingerprint

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/meshnode/meshnode/mesh"
)

// Detector measures one part of the device profile and writes it into p. An error means
// that part could not be measured: the Profiler reports it as a warning naming the
// detector and keeps the rest of the profile (a node without a working GPU driver still
// trains on its CPU).
type Detector interface {
	// Name says what the detector measures, for warnings ("GPU detection").
	Name() string
	// Detect measures and fills its fields of p.
	Detect(ctx context.Context, p *mesh.Profile) error
}

// Profiler measures this machine's device profile with its detectors, in order: compute,
// memory, disk, GPUs, host identity.
type Profiler struct {
	compute *computeDetector
	memory  *memoryDetector
	disk    *diskDetector
	gpus    *gpuDetector
	host    *hostDetector
	version string
}

// New returns a profiler for cfg.
func New(cfg Config) *Profiler {
	return &Profiler{
		compute: newComputeDetector(cfg.Compute),
		memory:  newMemoryDetector(cfg.MemoryBudget, cfg.MemoryBudgetFraction),
		disk:    newDiskDetector(cfg.DataDir, cfg.Compute.batchDuration()),
		gpus:    &gpuDetector{detect: detectGPUs},
		host:    newHostDetector(cfg.HostLabel),
		version: cfg.Version,
	}
}

// detectors are the profiler's detectors in the order Measure runs them.
func (p *Profiler) detectors() []Detector {
	return []Detector{p.compute, p.memory, p.disk, p.gpus, p.host}
}

// SetBusy tells the profiler how to learn whether this node's workers are training: a
// busy node keeps its last compute rates instead of timing its kernels beside them.
func (p *Profiler) SetBusy(busy func() bool) { p.compute.busy = busy }

// ComputeHooks are the compute measurements a Profiler times: GEMM, training steps (in
// one pass of the reference's batch and in one-sequence passes, each step timed with the
// cores' availability probe reads around it) and the process's CPU time they are
// normalised with (0: nothing to normalise, every probe reads 1).
type ComputeHooks struct {
	Gemm    func(m, n, k, threads int, batch time.Duration) float64
	Train   func(batch time.Duration, probe func() float64) (one, micro, share float64)
	CPUTime func() time.Duration
}

// WrapCompute replaces the compute measurements with what wrap makes of them. Tests that
// run many nodes in one process use it to share one quiet measurement among them.
func (p *Profiler) WrapCompute(wrap func(ComputeHooks) ComputeHooks) {
	c := p.compute
	h := wrap(ComputeHooks{Gemm: c.gemm, Train: c.train, CPUTime: c.cpuTime})
	c.gemm, c.train, c.cpuTime = h.Gemm, h.Train, h.CPUTime
}

// Measure runs every detector once: about one second of GEMM on the engine's kernels at
// the configured training shape, as long of whole training steps of a reference model,
// then memory, disk, GPUs and the host identity. A detector that fails (a GPU query, say) leaves its fields
// zero and is returned as warn, never as a failed profile; err is only the context's.
func (p *Profiler) Measure(ctx context.Context) (prof mesh.Profile, warn error) {
	if err := ctx.Err(); err != nil {
		return prof, err
	}
	prof = mesh.Profile{OS: runtime.GOOS, Arch: runtime.GOARCH, Version: p.version, GPUs: []mesh.GPU{}}
	for _, d := range p.detectors() {
		if err := d.Detect(ctx, &prof); err != nil && warn == nil {
			warn = fmt.Errorf("%s: %w", d.Name(), err)
		}
	}
	prof.MeasuredAt = time.Now().UTC()
	return prof, warn
}

// MicroEfficiency is the node's training rate on one-sequence passes over its rate on
// passes of trainReferenceBatch sequences (balancer.Node.MicroEfficiency), at most 1; 0
// where either was not measured.
func MicroEfficiency(p *mesh.Profile) float64 {
	if !(p.TrainGFLOPS > 0) || !(p.TrainMicroGFLOPS > 0) {
		return 0
	}
	return min(1, p.TrainMicroGFLOPS/p.TrainGFLOPS)
}

// HostShare is the fraction of its host's cores p's node keeps busy while it trains
// (balancer.Node.HostShare): the measured TrainHostShare, 0 (priced as a whole host
// share) where none was measured.
func HostShare(p *mesh.Profile) float64 {
	if s := p.TrainHostShare; s > 0 && s <= 1 {
		return s
	}
	return 0
}

// ComputeGFLOPS is the speed the balancer plans a node's compute with: its measured
// training rate, or its GEMM rate from a node that does not measure one.
func ComputeGFLOPS(p *mesh.Profile) float64 {
	if p.TrainGFLOPS > 0 {
		return p.TrainGFLOPS
	}
	return p.GemmGFLOPS
}
