package node

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// Profiler measures this machine's device profile. Its fields are the measurement hooks,
// replaceable in tests.
type Profiler struct {
	cfg     ProfileConfig
	dataDir string
	budget  uint64  // fixed memory budget; 0: fraction × available
	frac    float64 // budget fraction of available memory
	version string

	gemm   func(m, n, k, threads int, batch time.Duration) float64
	train  func(batch time.Duration) float64 // training GFLOP/s (wall clock) of trainReference
	memory func() (total, available uint64)
	disk   func(dir string) uint64
	// diskBW measures the data directory's read and write bandwidth (measureDisk).
	diskBW func(dir string, limit time.Duration) (read, write float64)
	gpus   func() ([]mesh.GPU, error)
	// cpuTime reads the process's CPU time (processCPUTime); tests replace it.
	cpuTime func() time.Duration
	// busy reports whether this node's workers are training; nil means never.
	busy func() bool

	// The compute rates of the last measurement, kept while the node is busy.
	measured            bool
	lastGemm, lastTrain float64
	// The disk bandwidths, measured once: the data directory's disk does not change.
	diskMeasured                bool
	lastDiskRead, lastDiskWrite float64
}

// NewProfiler returns a profiler for cfg's profile settings and data directory.
func NewProfiler(cfg Config) *Profiler {
	frac := cfg.MemoryBudgetFraction
	if frac == 0 {
		frac = 0.8
	}
	return &Profiler{
		cfg: cfg.Profile, dataDir: cfg.DataDir, budget: cfg.MemoryBudget, frac: frac, version: cfg.Version,
		gemm: kernels.MeasureGemm, train: measureTraining, memory: systemMemory, disk: diskFree, diskBW: measureDisk, gpus: detectGPUs, cpuTime: processCPUTime,
	}
}

// Measure runs every measurement once: about one second of GEMM on the engine's kernels at
// the configured training shape, as long of whole training steps of a reference model,
// then memory, disk and GPUs. A GPU query that fails is
// reported as no GPU (and returned as warn), never as a failed profile.
func (p *Profiler) Measure(ctx context.Context) (prof mesh.Profile, warn error) {
	if err := ctx.Err(); err != nil {
		return prof, err
	}
	m, n, k := p.cfg.shape()
	threads := p.cfg.Threads
	if threads <= 0 {
		threads = kernels.Threads()
	}
	// A node that trains does not time its kernels again: its workers share the CPU with
	// the measurement, in this process, so the CPU-time normalisation cannot take them out;
	// the node would look slower than it is, the leader would plan with that, and the
	// measurement would slow the training. It keeps the rates it measured last.
	gflops, train := p.lastGemm, p.lastTrain
	if !p.measured || p.busy == nil || !p.busy() {
		wall0, cpu0 := time.Now(), p.cpuTime()
		gflops = p.gemm(m, n, k, p.cfg.Threads, p.cfg.batchDuration())
		gflops = cpuNormalisedRate(gflops, time.Since(wall0), p.cpuTime()-cpu0, threads, p.cfg.slowdown())
		train = 0
		if p.train != nil {
			wall0, cpu0 = time.Now(), p.cpuTime()
			train = p.train(p.cfg.batchDuration())
			train = cpuNormalisedRate(train, time.Since(wall0), p.cpuTime()-cpu0, kernels.Threads(), p.cfg.slowdown())
		}
		p.measured, p.lastGemm, p.lastTrain = true, gflops, train
	}
	if !p.diskMeasured && p.diskBW != nil {
		// Bounded: at most diskProbeBytes each way, each direction for at most twice a
		// GEMM batch (50 ms at least).
		p.lastDiskRead, p.lastDiskWrite = p.diskBW(p.dataDir, max(2*p.cfg.batchDuration(), 50*time.Millisecond))
		p.diskMeasured = true
	}
	total, avail := p.memory()
	prof = mesh.Profile{
		GemmGFLOPS:       gflops,
		GemmShape:        fmt.Sprintf("%dx%dx%d", m, n, k),
		TrainGFLOPS:      train,
		Slowdown:         p.cfg.slowdown(),
		Cores:            runtime.GOMAXPROCS(0),
		MemoryTotalBytes: total, MemoryAvailableBytes: avail,
		// Clamped to what peers accept (mesh.Profile.Validate): a filesystem that reports
		// an absurd free size must not get the node's own heartbeats refused.
		MemoryBudgetBytes: min(p.budget, mesh.MaxProfileMemoryBytes),
		DiskFreeBytes:     min(p.disk(p.dataDir), mesh.MaxProfileDiskBytes),
		DiskReadBps:       p.lastDiskRead, DiskWriteBps: p.lastDiskWrite,
		OS: runtime.GOOS, Arch: runtime.GOARCH, Version: p.version,
		GPUs: []mesh.GPU{},
	}
	if prof.MemoryBudgetBytes == 0 {
		prof.MemoryBudgetBytes = uint64(p.frac * float64(avail))
	}
	gpus, err := p.gpus()
	if err != nil {
		warn = fmt.Errorf("GPU detection: %w", err)
	} else if gpus != nil {
		prof.GPUs = gpus
	}
	prof.MeasuredAt = time.Now().UTC()
	return prof, warn
}

// cpuNormalisedRate turns a wall-clock GEMM rate into the device's speed: the rate the
// threads would reach with the CPU to themselves (other processes on a shared machine
// take time that says nothing about this device), divided by the emulated slowdown. The
// kernels' slowdown emulation sleeps, which the CPU time leaves out too, so dividing by the
// factor here counts it exactly once. Without a CPU reading the wall rate is divided.
func cpuNormalisedRate(wallRate float64, wall, cpu time.Duration, threads int, slowdown float64) float64 {
	if wall <= 0 || cpu <= 0 || threads < 1 {
		return wallRate / slowdown
	}
	share := min(1, float64(cpu)/(float64(wall)*float64(threads)))
	return wallRate / share / slowdown
}

// trainReference is the model whose training steps the profile times: the default job's
// block shape (d_model 128, 4 heads, context 128), two blocks, 8 sequences a step. Small
// models reach a fraction of the GEMM rate (attention, LayerNorm, GELU, AdamW and small
// matrices), so planning their compute with the GEMM rate alone underestimates step times
// several-fold and makes any communication look dear.
var trainReference = model.Config{Layers: 2, DModel: 128, Heads: 4, Context: 128, Vocab: 256}

const trainReferenceBatch = 8

// measureTraining times training steps of trainReference for at least d and returns their
// rate in GFLOP/s, counted with the cost model the balancer plans with. It returns 0 if the
// reference cannot train (it always can; the profile then falls back to the GEMM rate).
func measureTraining(d time.Duration) float64 {
	m, err := parallel.MeasureTraining(trainReference, trainReferenceBatch, 1, d)
	if err != nil {
		return 0
	}
	var perToken float64
	for _, l := range trainReference.LayerCosts() {
		perToken += l.ForwardFLOPsPerToken + l.BackwardFLOPsPerToken
	}
	return m.TokensPerSec * perToken / 1e9
}

// ComputeGFLOPS is the speed the balancer plans a node's compute with: its measured
// training rate, or its GEMM rate from a node that does not measure one.
func ComputeGFLOPS(p *mesh.Profile) float64 {
	if p.TrainGFLOPS > 0 {
		return p.TrainGFLOPS
	}
	return p.GemmGFLOPS
}
