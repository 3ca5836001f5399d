package fingerprint

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

// computeDetector times the engine's own kernels: GEMM at the training shape and whole
// training steps of a reference model, each normalised by the CPU time the process got.
// Its function fields are the measurement hooks, replaceable in tests.
type computeDetector struct {
	cfg   ComputeConfig
	gemm  func(m, n, k, threads int, batch time.Duration) float64
	train func(batch time.Duration) float64 // training GFLOP/s (wall clock) of trainReference
	// trainMicro is train with one sequence per pass (trainReferenceBatch micro-batches).
	trainMicro func(batch time.Duration) float64
	// cpuTime reads the process's CPU time (ProcessCPUTime) and now the wall clock
	// (time.Now); tests replace them.
	cpuTime func() time.Duration
	now     func() time.Time
	// avail probes the share of threads cores other programs leave this process
	// (probeAvailability); tests replace it.
	avail func(threads int) float64
	// busy reports whether this node's workers are training; nil means never.
	busy func() bool

	// The compute rates of the last measurement, kept while the node is busy.
	measured                       bool
	lastGemm, lastTrain, lastMicro float64
}

func newComputeDetector(cfg ComputeConfig) *computeDetector {
	return &computeDetector{cfg: cfg, gemm: kernels.MeasureGemm, train: measureTraining(1),
		trainMicro: measureTraining(trainReferenceBatch), cpuTime: ProcessCPUTime, now: time.Now, avail: probeAvailability}
}

func (c *computeDetector) Name() string { return "compute measurement" }

// Detect fills the GEMM and training rates, the shape, the slowdown and the cores.
func (c *computeDetector) Detect(_ context.Context, p *mesh.Profile) error {
	m, n, k := c.cfg.shape()
	threads := c.cfg.Threads
	if threads <= 0 {
		threads = kernels.Threads()
	}
	// A node that trains does not time its kernels again: its workers share the CPU with
	// the measurement, in this process, so the CPU-time normalisation cannot take them out;
	// the node would look slower than it is, the leader would plan with that, and the
	// measurement would slow the training. It keeps the rates it measured last.
	if !c.measured || c.busy == nil || !c.busy() {
		wall0, cpu0 := c.now(), c.cpuTime()
		gflops := c.gemm(m, n, k, c.cfg.Threads, c.cfg.batchDuration())
		gflops = cpuNormalisedRate(gflops, c.now().Sub(wall0), c.cpuTime()-cpu0, threads, c.cfg.slowdown())
		// The cores' availability is probed before and after the training runs and the
		// larger reading kept: other programs' load comes in bursts (a testnet's other
		// nodes probe their links while the last one profiles), and a burst that hit one
		// probe but not the training made a slowdown-3 node profile at twice its rate.
		before := c.avail(kernels.Threads())
		train, micro := c.wallRate(c.train), 0.0
		if train > 0 {
			micro = c.wallRate(c.trainMicro)
		}
		avail := max(before, c.avail(kernels.Threads()))
		train, micro = train/avail, micro/avail
		c.measured, c.lastGemm, c.lastTrain, c.lastMicro = true, gflops, train, micro
	}
	p.GemmGFLOPS, p.TrainGFLOPS, p.TrainMicroGFLOPS = c.lastGemm, c.lastTrain, c.lastMicro
	p.GemmShape = fmt.Sprintf("%dx%dx%d", m, n, k)
	p.Slowdown = c.cfg.slowdown()
	p.Cores = runtime.GOMAXPROCS(0)
	return nil
}

// wallRate is measure's training rate for one batch duration, 0 without measure; the
// profile divides it by the share of the cores other programs left this process
// (probeAvailability). The emulated slowdown is in it already: the kernels' sleeps are in
// the steps' wall time.
//
// It is not normalised by its own CPU time, as the GEMM rate is: a training step keeps
// its threads busy only part of the time even on an idle machine (optimizer, LayerNorm,
// small GEMMs and the fork-join between them; the development machine, idle, kept 0.75 of
// its 2 threads busy in one pass of 8 sequences, 0.62 in passes of one, against 0.95 for
// the GEMM), so dividing by that share priced the step's own idle threads as other
// programs' load: every quick-start profile read 1.2–1.4× its training rate (206–227
// GFLOP/s where the reference trains at 143–163) and every first plan ran slower than
// predicted. Nor by the GEMM's share: an emulated slowdown leaves its threads idle while
// awake too (slowdown 3: the GEMM kept 0.61 of 2 threads busy between its sleeps on an
// idle machine), and the quick start's slowdown-3 node profiled at twice what it trains at.
func (c *computeDetector) wallRate(measure func(time.Duration) float64) float64 {
	if measure == nil {
		return 0
	}
	return measure(c.cfg.batchDuration())
}

// availabilityProbe is how long probeAvailability keeps the cores busy.
const availabilityProbe = 200 * time.Millisecond

// probeAvailability keeps threads goroutines computing (plain arithmetic, no kernels, so
// no emulated slowdown) for availabilityProbe and returns the share of their cores they
// got, in (0, 1]: what other programs leave this process. 1 where the process's CPU time
// cannot be read.
func probeAvailability(threads int) float64 {
	cpu0, wall0 := ProcessCPUTime(), time.Now()
	if cpu0 <= 0 || threads < 1 {
		return 1
	}
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() { spin(wall0.Add(availabilityProbe)) })
	}
	wg.Wait()
	cpu, wall := ProcessCPUTime()-cpu0, time.Since(wall0)
	if cpu <= 0 || wall <= 0 {
		return 1
	}
	return min(1, float64(cpu)/(float64(wall)*float64(threads)))
}

// spin keeps its goroutine computing until deadline.
func spin(deadline time.Time) {
	x := 1.0
	for time.Now().Before(deadline) {
		for range 1000 {
			x = x*1.0000001 + 1e-9
		}
	}
	runtime.KeepAlive(x)
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

// measureTraining returns the measurement of trainReference's training steps cut into
// micro micro-batches: it times steps for at least d and returns their rate in GFLOP/s,
// counted with the cost model the balancer plans with, or 0 if the reference cannot train
// (it always can; the profile then falls back to the GEMM rate). With one micro-batch each
// pass computes trainReferenceBatch sequences (TrainGFLOPS); with trainReferenceBatch, one
// (TrainMicroGFLOPS), as the pipeline stages of a plan with one-sequence micro-batches do.
func measureTraining(micro int) func(d time.Duration) float64 {
	return func(d time.Duration) float64 {
		m, err := parallel.MeasureTraining(trainReference, trainReferenceBatch, micro, d)
		if err != nil {
			return 0
		}
		var perToken float64
		for _, l := range trainReference.LayerCosts() {
			perToken += l.ForwardFLOPsPerToken + l.BackwardFLOPsPerToken
		}
		return m.TokensPerSec * perToken / 1e9
	}
}

// MicroPassTokens are the tokens one pass computes in the two training measurements:
// TrainMicroGFLOPS's (one sequence) and TrainGFLOPS's (trainReferenceBatch sequences),
// the sizes balancer.SmallMicroTokens and LargeMicroTokens name.
func MicroPassTokens() (small, large int) {
	return trainReference.Context, trainReferenceBatch * trainReference.Context
}
