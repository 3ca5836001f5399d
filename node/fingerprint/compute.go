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
	cfg  ComputeConfig
	gemm func(m, n, k, threads int, batch time.Duration) float64
	// train times trainReference's steps in one pass of trainReferenceBatch sequences and
	// in one-sequence passes for at least d each, each step with the cores' availability
	// probed around it by probe (measureTrainingRates), and returns both rates in GFLOP/s
	// and the share of the host's cores the one-sequence steps kept busy.
	train func(d time.Duration, probe func() float64) (one, micro, share float64)
	// cpuTime reads the process's CPU time (ProcessCPUTime) and now the wall clock
	// (time.Now); tests replace them.
	cpuTime func() time.Duration
	now     func() time.Time
	// avail probes the share of threads cores other programs leave this process for d
	// (probeAvailability); tests replace it.
	avail func(threads int, d time.Duration) float64
	// busy reports whether this node's workers are training; nil means never.
	busy func() bool

	// The compute rates of the last measurement, kept while the node is busy.
	measured                                  bool
	lastGemm, lastTrain, lastMicro, lastShare float64
}

func newComputeDetector(cfg ComputeConfig) *computeDetector {
	c := &computeDetector{cfg: cfg, gemm: kernels.MeasureGemm, train: measureTrainingRates, cpuTime: ProcessCPUTime, now: time.Now}
	c.avail = func(threads int, d time.Duration) float64 { return probeAvailability(threads, d, c.cpuTime) }
	return c
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
		train, micro, share := 0.0, 0.0, 0.0
		if c.train != nil {
			threads := kernels.Threads()
			train, micro, share = c.train(c.cfg.batchDuration(), func() float64 { return c.avail(threads, availabilityProbe) })
		}
		c.measured, c.lastGemm, c.lastTrain, c.lastMicro, c.lastShare = true, gflops, train, micro, share
	}
	p.GemmGFLOPS, p.TrainGFLOPS, p.TrainMicroGFLOPS, p.TrainHostShare = c.lastGemm, c.lastTrain, c.lastMicro, c.lastShare
	p.GemmShape = fmt.Sprintf("%dx%dx%d", m, n, k)
	p.Slowdown = c.cfg.slowdown()
	p.Cores = runtime.GOMAXPROCS(0)
	return nil
}

// measureTrainingRates times trainReference's training steps in one pass of
// trainReferenceBatch sequences (TrainGFLOPS) and in one-sequence passes
// (TrainMicroGFLOPS, as the stages of a plan with one-sequence micro-batches compute),
// alternately, for at least d each (longer while other programs' bursts disturb them:
// quietEnough), and returns both rates with the cores to themselves:
// each step's wall time times the share of the cores probe found other programs left
// around it (aloneRate). The emulated slowdown is in the rates: the kernels' sleeps are in
// the steps' wall time. 0, 0 if the reference cannot train (it always can; the profile
// then falls back to the GEMM rate).
//
// The rates are not normalised by the training's own CPU time, as the GEMM rate is: a
// training step keeps its threads busy only part of the time even on an idle machine
// (optimizer, LayerNorm, small GEMMs and the fork-join between them; the development
// machine, idle, kept 0.75 of its 2 threads busy in one pass of 8 sequences, 0.62 in
// passes of one, against 0.95 for the GEMM), so dividing by that share priced the step's
// own idle threads as other programs' load: every quick-start profile read 1.2–1.4× its
// training rate (206–227 GFLOP/s where the reference trains at 143–163). Nor by the GEMM's
// share: an emulated slowdown leaves its threads idle while awake too (slowdown 3: 0.61
// of 2 threads between its sleeps, idle machine). And not by one probe for the whole
// measurement: a testnet's nodes profile at once, and the sleeps of the slowed ones make
// the load come and go within a second (the slowdown-3 node profiled at twice what it
// trains at); probes around each step follow it.
//
// share is the one-sequence steps' CPU time over their time with the cores to themselves
// and the host's cores (hostShare): two co-located nodes training at once each took about
// 1.25× their time alone on the development machine, where pricing each at a whole host
// share charged 2×.
func measureTrainingRates(d time.Duration, probe func() float64) (one, micro, share float64) {
	var perToken float64
	for _, l := range trainReference.LayerCosts() {
		perToken += l.FLOPsPerToken()
	}
	flops := perToken * float64(trainReferenceBatch*trainReference.Context)
	var trainers [2]*parallel.Trainer
	for i, m := range []int{1, trainReferenceBatch} {
		tr, err := parallel.NewReferenceTrainer(trainReference, trainReferenceBatch, m)
		if err != nil {
			return 0, 0, 0
		}
		defer tr.Close()
		if _, err := tr.Step(context.Background()); err != nil { // warm-up: allocation
			return 0, 0, 0
		}
		trainers[i] = tr
	}
	var steps [2][]timedStep
	var spent [2]time.Duration
	before := probe()
	for spent[0] < d || spent[1] < d || !quietEnough(steps, spent, d) {
		for i, tr := range trainers {
			t0, slept0, cpu0 := time.Now(), kernels.SlowdownSlept(), ProcessCPUTime()
			if _, err := tr.Step(context.Background()); err != nil {
				return 0, 0, 0
			}
			wall, slept, cpu := time.Since(t0), kernels.SlowdownSlept()-slept0, ProcessCPUTime()-cpu0
			after := probe()
			steps[i] = append(steps[i], timedStep{wall: wall, slept: slept, cpu: cpu, avail: (before + after) / 2})
			spent[i] += wall
			before = after
		}
	}
	steps[0], steps[1] = quietest(steps[0]), quietest(steps[1])
	return aloneRate(flops, steps[0]), aloneRate(flops, steps[1]), hostShare(steps[0], runtime.NumCPU())
}

// A training measurement keeps stepping past its time while too few of its steps ran on
// a quiet host, up to quietWait times its time, and then rates only the quiet ones (where
// there are quietMin of each kind). The availability probe takes out other programs' load
// only roughly: a busy loop that never sleeps gets less than its share beside a program
// that sleeps and wakes (a speed proof, a link probe, an emulated slow device), so a
// step's time scaled by the probe's reading comes out short. On the quick start each new
// node profiled while the one before it answered its speed proof: the slowdown-2 node's
// one-sequence rate read 73–80 GFLOP/s where it trains at 55–60.
const (
	// quietAvail is the least probe reading of a step counted as run on a quiet host.
	quietAvail = 0.9
	// quietMin is how many quiet steps of each kind a measurement needs to rate them alone.
	quietMin = 8
	// quietWait bounds how long, in multiples of its time, a measurement waits for them.
	quietWait = 4
)

// quietEnough says the measurement of steps (each kind spent spent of its time d) may
// stop: each kind has quietMin quiet steps and at least half of its steps quiet, or the
// measurement has waited quietWait × d for them.
func quietEnough(steps [2][]timedStep, spent [2]time.Duration, d time.Duration) bool {
	for i := range steps {
		if spent[i] >= quietWait*d {
			return true
		}
		q := quietSteps(steps[i])
		if q < quietMin || 2*q < len(steps[i]) {
			return false
		}
	}
	return true
}

// quietSteps counts steps's quiet steps (quietAvail).
func quietSteps(steps []timedStep) int {
	n := 0
	for _, s := range steps {
		if s.avail >= quietAvail {
			n++
		}
	}
	return n
}

// quietest is steps's quiet steps where there are quietMin of them, else all of steps
// (a host never quiet is rated by the probe's readings, roughly).
func quietest(steps []timedStep) []timedStep {
	if quietSteps(steps) < quietMin {
		return steps
	}
	var out []timedStep
	for _, s := range steps {
		if s.avail >= quietAvail {
			out = append(out, s)
		}
	}
	return out
}

// hostShare is the share of cores cores that steps kept busy with the cores to themselves:
// their CPU time over their uncontended time (aloneTime) times cores, in [0, 1]; 0 when
// the CPU time cannot be read.
func hostShare(steps []timedStep, cores int) float64 {
	var cpu time.Duration
	for _, s := range steps {
		if s.cpu <= 0 {
			return 0
		}
		cpu += s.cpu
	}
	alone := aloneTime(steps)
	if !(alone > 0) || cores < 1 {
		return 0
	}
	return min(1, cpu.Seconds()/(alone*float64(cores)))
}

// timedStep is one timed training step, the part of it the slowdown emulation slept, and
// the share of the cores other programs left around it.
type timedStep struct {
	wall, slept, cpu time.Duration
	avail            float64
}

// aloneRate is flops per step over the steps' time with the cores to themselves, in
// GFLOP/s: each step's computing time (its wall time less the emulation's sleeps) times
// the share of the cores it had (in (0, 1]), plus the sleeps, which the emulation charges
// from the kernels' uncontended time and so take as long on a busy machine as on an idle
// one (scaling them too profiled a slowdown-3 node at load 5 up to 1.6× fast).
func aloneRate(flops float64, steps []timedStep) float64 {
	alone := aloneTime(steps)
	if !(alone > 0) {
		return 0
	}
	return flops * float64(len(steps)) / alone / 1e9
}

// aloneTime is steps' time with the cores to themselves, in seconds (aloneRate).
func aloneTime(steps []timedStep) float64 {
	var alone float64
	for _, s := range steps {
		slept := min(max(s.slept, 0), s.wall)
		alone += (s.wall-slept).Seconds()*min(1, max(s.avail, 1e-3)) + slept.Seconds()
	}
	return alone
}

// availabilityProbe is how long each availability probe keeps the cores busy: a few of
// the scheduler's time slices, short beside a training step.
const availabilityProbe = 20 * time.Millisecond

// probeAvailability keeps threads goroutines computing (plain arithmetic, no kernels, so
// no emulated slowdown) for d and returns the share of their cores they got by cpuTime,
// in (0, 1]: what other programs leave this process. 1 where the CPU time cannot be read.
func probeAvailability(threads int, d time.Duration, cpuTime func() time.Duration) float64 {
	cpu0, wall0 := cpuTime(), time.Now()
	if cpu0 <= 0 || threads < 1 {
		return 1
	}
	var wg sync.WaitGroup
	for range threads {
		wg.Go(func() { Spin(wall0.Add(d)) })
	}
	wg.Wait()
	cpu, wall := cpuTime()-cpu0, time.Since(wall0)
	if cpu <= 0 || wall <= 0 {
		return 1
	}
	return min(1, float64(cpu)/(float64(wall)*float64(threads)))
}

// Spin keeps its goroutine computing until deadline: the probe of a core's availability
// (how much of it a busy loop gets), here and in the node's host-load measurement.
func Spin(deadline time.Time) {
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

// MicroPassTokens are the tokens one pass computes in the two training measurements:
// TrainMicroGFLOPS's (one sequence) and TrainGFLOPS's (trainReferenceBatch sequences),
// the sizes balancer.SmallMicroTokens and LargeMicroTokens name.
func MicroPassTokens() (small, large int) {
	return trainReference.Context, trainReferenceBatch * trainReference.Context
}
