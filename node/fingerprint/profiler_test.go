package fingerprint

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/parallel"
	"github.com/meshnode/meshnode/scheduler"
)

// defaultConfig is the profile configuration `meshnode join` starts from.
func defaultConfig() Config {
	return Config{Compute: ComputeConfig{GemmM: 2048, GemmN: 512, GemmK: 512, BatchDuration: 300 * time.Millisecond, Slowdown: 1},
		DataDir: os.TempDir(), MemoryBudgetFraction: 0.8, Version: "test"}
}

func fakeProfiler(cfg Config) *Profiler {
	p := New(cfg)
	p.compute.gemm = func(m, n, k, threads int, d time.Duration) float64 { return 100 }
	p.compute.train = func(_ time.Duration, probe func() float64) (float64, float64, float64) {
		a := probe() // a fake wall rate of 40 (30) over the share of the cores it had
		return 40 / a, 30 / a, 0.6
	}
	p.disk.bw = func(string, time.Duration) (float64, float64) { return 500e6, 250e6 }
	p.memory.memory = func() (uint64, uint64) { return 16 << 30, 10 << 30 }
	p.disk.free = func(string) uint64 { return 1 << 40 }
	p.gpus.detect = func() ([]mesh.GPU, error) { return nil, nil }
	p.compute.cpuTime = func() time.Duration { return 0 }
	p.compute.now = time.Now
	p.compute.avail = func(int, time.Duration) float64 { return 1 }
	return p
}

// TestBusyNodeKeepsItsComputeRates: a node whose workers train does not time its kernels
// again (they would share the CPU with the training) but keeps its last rates and still
// refreshes its memory; idle again, it measures.
func TestBusyNodeKeepsItsComputeRates(t *testing.T) {
	p := fakeProfiler(defaultConfig())
	busy, timed := false, 0
	rate := 100.0
	p.SetBusy(func() bool { return busy })
	p.compute.gemm = func(m, n, k, threads int, d time.Duration) float64 { timed++; return rate }
	measure := func() mesh.Profile {
		prof, err := p.Measure(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return prof
	}
	measure()
	busy, rate = true, 50
	p.memory.memory = func() (uint64, uint64) { return 16 << 30, 5 << 30 }
	if prof := measure(); timed != 1 || prof.GemmGFLOPS != 100 || prof.TrainGFLOPS != 40 || prof.MemoryAvailableBytes != 5<<30 {
		t.Errorf("busy: GEMM timed %d times, rates %v/%v, available %d; want 1, 100/40 kept, memory refreshed", timed, prof.GemmGFLOPS, prof.TrainGFLOPS, prof.MemoryAvailableBytes)
	}
	busy = false
	if prof := measure(); timed != 2 || prof.GemmGFLOPS != 50 {
		t.Errorf("idle again: GEMM timed %d times, rate %v; want 2 and the new 50", timed, prof.GemmGFLOPS)
	}
}

func TestProfileSlowdownAndBudget(t *testing.T) {
	cfg := defaultConfig()
	cfg.Compute.Slowdown = 4
	prof, err := fakeProfiler(cfg).Measure(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Without a CPU-time reading the GEMM's wall rate is divided by the slowdown; the
	// training's wall rates are what the node trains at: the kernels' sleeps are in them.
	if prof.GemmGFLOPS != 25 || prof.TrainGFLOPS != 40 || prof.Slowdown != 4 {
		t.Errorf("slowdown 4 of 100 (GEMM) and 40 (training) GFLOP/s gave %v and %v (slowdown %v)", prof.GemmGFLOPS, prof.TrainGFLOPS, prof.Slowdown)
	}
	if prof.TrainMicroGFLOPS != 30 || MicroEfficiency(&prof) != 0.75 {
		t.Errorf("one-sequence passes at 30 of 40 GFLOP/s: train_micro_gflops %v, efficiency %v; want 30 and 0.75",
			prof.TrainMicroGFLOPS, MicroEfficiency(&prof))
	}
	if ComputeGFLOPS(&prof) != 40 {
		t.Errorf("the balancer would plan with %v GFLOP/s, want the training rate 40", ComputeGFLOPS(&prof))
	}
	if prof.MemoryBudgetBytes != uint64(0.8*float64(10<<30)) {
		t.Errorf("default budget %d, want 80%% of available", prof.MemoryBudgetBytes)
	}
	if prof.DiskReadBps != 500e6 || prof.DiskWriteBps != 250e6 {
		t.Errorf("disk bandwidths %g, %g B/s, want the measured 500e6, 250e6", prof.DiskReadBps, prof.DiskWriteBps)
	}
	if prof.GemmShape != "2048x512x512" || prof.GPUs == nil || prof.DiskFreeBytes != 1<<40 || prof.Cores < 1 {
		t.Errorf("profile %+v", prof)
	}
	cfg.MemoryBudget = 3 << 30
	prof, _ = fakeProfiler(cfg).Measure(context.Background())
	if prof.MemoryBudgetBytes != 3<<30 {
		t.Errorf("fixed budget %d, want 3 GiB", prof.MemoryBudgetBytes)
	}
}

func TestRealSystemMeasurements(t *testing.T) {
	total, avail := systemMemory()
	if total == 0 || avail == 0 || avail > total {
		t.Errorf("memory total %d available %d", total, avail)
	}
	if diskFree(t.TempDir()) == 0 {
		t.Error("no free disk measured")
	}
}

// TestProfileGemmAgreesWithKernelBenchmark is acceptance 4: the profile's GEMM rate agrees
// within 30% with a testing.Benchmark of kernels.Gemm at the same training shape. The
// profile rates GEMM per CPU-second received, so the benchmark is normalised the same way
// (processes and tests running beside it take CPU that says nothing about the kernels).
// Timing on a shared machine is noisy, so up to three rounds are tried; a profile that
// measured anything else would miss in every round.
func TestProfileGemmAgreesWithKernelBenchmark(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	const m, n, k = 2048, 512, 512
	cfg := defaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Compute = ComputeConfig{GemmM: m, GemmN: n, GemmK: k, BatchDuration: 150 * time.Millisecond}
	a, b, c := make([]float32, m*k), make([]float32, k*n), make([]float32, m*n)
	for i := range a {
		a[i] = float32(i%7) - 3
	}
	for i := range b {
		b[i] = float32(i%5) - 2
	}
	var ratio float64
	for round := range 3 {
		prof, err := New(cfg).Measure(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		wall0, cpu0 := time.Now(), ProcessCPUTime()
		res := testing.Benchmark(func(bb *testing.B) {
			for bb.Loop() {
				kernels.Gemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
			}
		})
		wall, cpu := time.Since(wall0), ProcessCPUTime()-cpu0
		bench := cpuNormalisedRate(2*float64(m*n*k)*float64(res.N)/res.T.Seconds()/1e9, wall, cpu, kernels.Threads(), 1)
		ratio = prof.GemmGFLOPS / bench
		t.Logf("round %d: profile %.1f GFLOP/s, benchmark %.1f GFLOP/s (%d iterations), ratio %.2f", round, prof.GemmGFLOPS, bench, res.N, ratio)
		if ratio > 0.7 && ratio < 1.3 {
			return
		}
	}
	t.Errorf("profile and benchmark disagree by more than 30%% (ratio %.2f)", ratio)
}

// TestCPUNormalisedRate: time the process did not get the CPU (other processes, or the
// slowdown emulation's sleeps) does not count against the device; the slowdown does, once.
func TestCPUNormalisedRate(t *testing.T) {
	cases := []struct {
		wall, cpu time.Duration
		threads   int
		slowdown  float64
		want      float64
	}{
		{time.Second, 2 * time.Second, 2, 1, 100}, // two threads, full cores
		{time.Second, time.Second, 2, 1, 200},     // got half the CPU
		{time.Second, time.Second / 3, 1, 3, 100}, // slept 2/3 of the time, slowdown 3
		{time.Second, 3 * time.Second, 2, 1, 100}, // other goroutines: capped at full share
		{time.Second, 0, 2, 2, 50},                // no CPU reading: wall rate / slowdown
	}
	for _, c := range cases {
		if got := cpuNormalisedRate(100, c.wall, c.cpu, c.threads, c.slowdown); math.Abs(got-c.want) > 1e-6*c.want {
			t.Errorf("%+v: %v, want %v", c, got, c.want)
		}
	}
}

// TestTrainingRatePredictsStepTime: the profile's training rate, with the cost model the
// balancer uses, predicts the step time of the default job's model (4 blocks, batch 16 in
// 4 micro-batches, not the reference's shape) within a factor of 1.5 of the engine's own
// measurement in the same run; the GEMM rate alone, the rate the planner used before,
// predicts it several times too fast. Both are ratios of measurements taken back to back,
// up to three rounds on a shared machine.
func TestTrainingRatePredictsStepTime(t *testing.T) {
	timingTest(t)
	job := jobspec.DefaultSpec()
	cfg := scheduler.ModelConfig(job)
	var perToken float64
	for _, l := range cfg.LayerCosts() {
		perToken += l.ForwardFLOPsPerToken + l.BackwardFLOPsPerToken
	}
	tokens := float64(job.Train.Batch * cfg.Context)
	var ratio float64
	for round := range 3 {
		rate, _, _ := measureTrainingRates(200*time.Millisecond, func() float64 { return 1 })
		gemm := kernels.MeasureGemm(2048, 512, 512, 0, 100*time.Millisecond)
		m, err := parallel.MeasureTraining(cfg, job.Train.Batch, 4, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		actual := m.Elapsed.Seconds() / float64(m.Steps)
		predicted := tokens * perToken / (rate * 1e9)
		ratio = predicted / actual
		t.Logf("round %d: step %.3f s measured, %.3f s predicted from %.1f training GFLOP/s (ratio %.2f), %.3f s from %.1f GEMM GFLOP/s",
			round, actual, predicted, rate, ratio, tokens*perToken/(gemm*1e9), gemm)
		if ratio > 1/1.5 && ratio < 1.5 {
			return
		}
	}
	t.Errorf("the training rate predicts %.2f× the measured step time", ratio)
}

// TestTrainingRateIsTimedWithTheCoresToItself: a training rate is the steps' work over
// their time with the cores to themselves, each step's wall time times the share of the
// cores probed around it, not the training's own CPU share, which stays below 1 on an idle
// machine (optimizer, small ops, fork-join) and below that under an emulated slowdown:
// priced as other programs' load, that share made every quick-start profile 1.2–1.4× too
// fast, the slowdown-3 node's 2×. Two steps of 1 GFLOP, 1 s each: one with the cores to
// itself, one with half of them (a burst of other work), 1.5 s alone: 4/3 GFLOP/s.
func TestTrainingRateIsTimedWithTheCoresToItself(t *testing.T) {
	steps := []timedStep{{wall: time.Second, avail: 1}, {wall: time.Second, avail: 0.5}}
	if r := aloneRate(1e9, steps); math.Abs(r-4.0/3) > 1e-12 {
		t.Errorf("rate %v GFLOP/s, want 4/3", r)
	}
	if r := aloneRate(1e9, nil); r != 0 {
		t.Errorf("no steps: rate %v, want 0", r)
	}
}

// TestTrainingRateIsMeasuredWithProbes: the real measurement takes steps of both shapes
// with a probe around each, and returns both rates.
func TestTrainingRateIsMeasuredWithProbes(t *testing.T) {
	probes := 0
	one, micro, _ := measureTrainingRates(50*time.Millisecond, func() float64 { probes++; return 1 })
	if !(one > 0) || !(micro > 0) || probes < 3 {
		t.Errorf("rates %v and %v GFLOP/s after %d probes; want both > 0 and a probe around every step", one, micro, probes)
	}
}

// TestAvailabilityProbe: the probe gets some share of the cores, at most all of them.
func TestAvailabilityProbe(t *testing.T) {
	if a := probeAvailability(2, 20*time.Millisecond, ProcessCPUTime); !(a > 0) || a > 1 {
		t.Errorf("availability %v, want in (0, 1]", a)
	}
}

// TestMicroRatePredictsOneSequenceStages: the quick start's pipeline computes one
// sequence per micro-batch, 16 a step; its step is predicted within 15% by the training
// rate scaled by the profile's micro-batch efficiency, as the balancer prices it, where the
// one-pass rate alone predicted it about 25% too fast (development machine, idle: the
// reference at 143–163 GFLOP/s in one pass of 8 sequences, 110–117 in passes of one). Ratios
// of back-to-back measurements, up to three rounds.
func TestMicroRatePredictsOneSequenceStages(t *testing.T) {
	timingTest(t)
	job := jobspec.DefaultSpec()
	cfg := scheduler.ModelConfig(job)
	var perToken float64
	for _, l := range cfg.LayerCosts() {
		perToken += l.FLOPsPerToken()
	}
	flops := float64(job.Train.Batch*cfg.Context) * perToken
	var ratio float64
	for round := range 3 {
		rate, micro, _ := measureTrainingRates(300*time.Millisecond, func() float64 { return 1 })
		m, err := parallel.MeasureTraining(cfg, job.Train.Batch, job.Train.Batch, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		actual := m.Elapsed.Seconds() / float64(m.Steps)
		ratio = flops / (micro * 1e9) / actual
		t.Logf("round %d: step %.3f s measured, %.3f s predicted at %.1f GFLOP/s (one-sequence passes; ratio %.2f), %.3f s at the one-pass %.1f",
			round, actual, flops/(micro*1e9), micro, ratio, flops/(rate*1e9), rate)
		if ratio > 1/1.15 && ratio < 1.15 {
			return
		}
	}
	t.Errorf("the one-sequence rate predicts %.2f× the measured step time", ratio)
}

// TestProfileOfSlowdownThreeIsAThird is issue #7's "slowdowns of 1 vs 3 change the
// measured GEMM speed accordingly", measured through the emulation itself: the kernels
// sleep (factor − 1)× their time and the profile times them. Both rates of a slowdown-3
// profile are a third of an unslowed one's, within 25%, in one of up to three rounds of
// back-to-back measurements (a shared machine is noisy; a profile that ignored the
// slowdown, or counted it twice, is off by 3× in every round).
func TestProfileOfSlowdownThreeIsAThird(t *testing.T) {
	timingTest(t)
	t.Cleanup(func() { kernels.SetSlowdown(1) })
	measure := func(f float64) mesh.Profile {
		cfg := defaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.Compute = ComputeConfig{GemmM: 2048, GemmN: 512, GemmK: 512, BatchDuration: 150 * time.Millisecond, Slowdown: f}
		kernels.SetSlowdown(f)
		p, err := New(cfg).Measure(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	within := func(r float64) bool { return r > 3/1.25 && r < 3*1.25 }
	var gemm, train float64
	for round := range 3 {
		fast, slow := measure(1), measure(3)
		gemm, train = fast.GemmGFLOPS/slow.GemmGFLOPS, fast.TrainGFLOPS/slow.TrainGFLOPS
		t.Logf("round %d: GEMM %.1f vs %.1f GFLOP/s (%.2f×), training %.1f vs %.1f (%.2f×)",
			round, fast.GemmGFLOPS, slow.GemmGFLOPS, gemm, fast.TrainGFLOPS, slow.TrainGFLOPS, train)
		if within(gemm) && within(train) {
			return
		}
	}
	t.Errorf("slowdown 3 measured %.2f× slower GEMM and %.2f× slower training, want 3× (±25%%)", gemm, train)
}

// timingTest skips a test whose assertions are ratios of wall-clock measurements unless
// testutil.TimingEnv is set. They are measurements, not checks of logic, and a loaded
// machine distorts them (`go test ./...` runs packages in parallel: on two cores the
// CPU-time normalisation cannot remove what a busy hyperthread sibling or the Go
// scheduler's spinning around the slowdown emulation's sleeps cost), so they run only when
// asked, on an otherwise idle machine:
//
//	MESHNODE_TIMING_TESTS=1 go test ./node/fingerprint -run 'TestTrainingRatePredictsStepTime|TestProfileOfSlowdownThreeIsAThird' -v

func timingTest(t *testing.T) {
	t.Helper()
	switch {
	case !testutil.TimingChecks():
		t.Skipf("timing measurement: set %s=1 on an idle machine to run it", testutil.TimingEnv)
	case testing.Short() || raceEnabled:
		t.Skip("timing measurement: the race detector distorts the kernels' timing")
	}
}

// TestMeasureDisk: the disk probe measures both directions of a real directory within its
// bound and leaves nothing behind; an unwritable directory is "not measured" (0, 0).
func TestMeasureDisk(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	read, write := measureDisk(dir, 200*time.Millisecond)
	testutil.Within(t, "disk probe", time.Since(start), 5*time.Second)
	if !(read > 0) || !(write > 0) {
		t.Fatalf("disk read %g B/s, write %g B/s: want both measured", read, write)
	}
	if left, err := os.ReadDir(dir); err != nil || len(left) != 0 {
		t.Fatalf("the probe left %v (%v)", left, err)
	}
	if r, w := measureDisk(filepath.Join(dir, "missing"), 50*time.Millisecond); r != 0 || w != 0 {
		t.Fatalf("a missing directory measured %g, %g B/s", r, w)
	}
	t.Logf("data directory: read %.0f MB/s, write %.0f MB/s", read/1e6, write/1e6)
}

// TestTrainingRateDoesNotScaleTheEmulationsSleeps: the slowdown emulation sleeps for the
// kernels' uncontended time, so a step's sleeps take as long at any load and only the rest
// of it is scaled by the cores it had. A slowdown-3 step of 1 s of work and 2 s of sleep,
// with half the cores (the work took 2 s): 4 s of wall, 3 s alone, not 2 s.
func TestTrainingRateDoesNotScaleTheEmulationsSleeps(t *testing.T) {
	steps := []timedStep{{wall: 4 * time.Second, slept: 2 * time.Second, avail: 0.5}}
	if r := aloneRate(3e9, steps); math.Abs(r-1) > 1e-12 {
		t.Errorf("rate %v GFLOP/s, want 1 (3 GFLOP in 3 s alone)", r)
	}
}

// TestHostShareIsMeasuredWithTheCoresToItself: the host share is the one-sequence steps'
// CPU time over their uncontended time and the host's cores. Other programs' load
// (avail < 1) stretches the steps' wall time but not the share; the emulation's sleeps
// count as idle, so a slowed node takes less of its host.
func TestHostShareIsMeasuredWithTheCoresToItself(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		name  string
		steps []timedStep
		want  float64
	}{
		{"idle", []timedStep{{wall: 100 * ms, cpu: 124 * ms, avail: 1}, {wall: 100 * ms, cpu: 124 * ms, avail: 1}}, 0.62},
		{"half the cores to other programs", []timedStep{{wall: 200 * ms, cpu: 124 * ms, avail: 0.5}}, 0.62},
		{"slowdown 3", []timedStep{{wall: 300 * ms, slept: 200 * ms, cpu: 120 * ms, avail: 1}}, 0.2},
		{"no CPU time", []timedStep{{wall: 100 * ms, avail: 1}}, 0},
		{"busier than the cores", []timedStep{{wall: 100 * ms, cpu: 300 * ms, avail: 1}}, 1},
	} {
		if got := hostShare(c.steps, 2); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: host share %.4f, want %.4f", c.name, got, c.want)
		}
	}
}

// TestNoisyStepsAreLeftOut: a measurement whose steps ran beside another program's
// bursts (probe readings under quietAvail) keeps stepping until enough quiet steps are
// taken and rates those alone; a host never quiet is rated by every step, as before, once
// the measurement has waited quietWait times its time.
func TestNoisyStepsAreLeftOut(t *testing.T) {
	const d = 100 * time.Millisecond
	step := func(avail float64) timedStep { return timedStep{wall: 10 * time.Millisecond, avail: avail} }
	var noisy, mixed []timedStep
	for range 2 * quietMin {
		noisy = append(noisy, step(0.5)) // scaled to 5 ms: twice the rate the step had
	}
	mixed = append(mixed, noisy...)
	for range quietMin {
		mixed = append(mixed, step(1))
	}
	spent := [2]time.Duration{d, d}
	if quietEnough([2][]timedStep{noisy, noisy}, spent, d) {
		t.Error("no quiet step yet: the measurement stopped")
	}
	if quietEnough([2][]timedStep{mixed, mixed}, spent, d) {
		t.Error("a third of the steps quiet: the measurement stopped")
	}
	if !quietEnough([2][]timedStep{noisy, noisy}, [2]time.Duration{quietWait * d, quietWait * d}, d) {
		t.Error("waited quietWait × d: the measurement goes on")
	}
	if got, want := aloneRate(1e9, quietest(mixed)), 100.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("rate of the quiet steps %v GFLOP/s, want %v (the noisy ones left out)", got, want)
	}
	if got, want := aloneRate(1e9, quietest(noisy)), 200.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("never quiet: rate %v GFLOP/s, want %v (every step, scaled by its reading)", got, want)
	}
	var quiet []timedStep
	for range quietMin {
		quiet = append(quiet, step(1), step(0.5))
	}
	if !quietEnough([2][]timedStep{quiet, quiet}, spent, d) {
		t.Error("half the steps quiet, quietMin of them: the measurement goes on")
	}
}

// TestNeverQuietMeasurementEnds: the real measurement on a host the probe always reads
// busy stops once it has waited quietWait times its time, and rates every step.
func TestNeverQuietMeasurementEnds(t *testing.T) {
	probes := 0
	one, micro, _ := measureTrainingRates(20*time.Millisecond, func() float64 { probes++; return 0.5 })
	if !(one > 0) || !(micro > 0) || probes < 3 {
		t.Errorf("rates %v and %v GFLOP/s after %d probes; want both > 0", one, micro, probes)
	}
}
