package parallel

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

var inboundTable = flag.Bool("inbound-table", false, "print the in-bound poisoning table (TestInboundPoisonTable)")

// scaler is the transport of a replica that poisons inside the norm bound: every reduce
// frame it sends carries its own values times s (the audit's −15), re-encoded with the
// frame's own codec so that it still decodes.
type scaler struct {
	Transport
	s float32
}

func (p scaler) Send(ctx context.Context, to string, f *frame.Frame) error {
	return alteringSend(ctx, p.Transport, to, f, p.AlterContribution)
}

func (p scaler) AlterContribution(_ context.Context, _ string, f *frame.Frame) (*frame.Frame, error) {
	return rewriteReduce(f, func(x float32) float32 { return x * p.s })
}

// inboundRun is one run of the in-bound poisoning table: n one-stage replicas, the last
// bad of them scaling what they send by −15, under sync mode and rule.
type inboundRun struct {
	sync    jobspec.Sync
	rule    jobspec.Aggregate
	n, bad  int
	steps   int
	scaleBy float32
	score   jobspec.Score // "": the default (auto)
	zero    int           // the ZeRO stage (0: none)
	stages  int           // pipeline stages per replica (0: one); stage s > 0 of replica i is node "ri.s"
	frags   int           // streaming's fragments (0: the default, one)
}

// train returns replica 0's (an honest one's) final validation loss and the
// contributions the honest workers dropped.
func (r inboundRun) train(t *testing.T) (float64, []Rejection) {
	t.Helper()
	val, rej, _ := r.trainNamed(t)
	return val, rej
}

// trainNamed is train that also returns the members the workers named offenders.
func (r inboundRun) trainNamed(t *testing.T) (float64, []Rejection, []string) {
	t.Helper()
	res := r.result(t)
	return res.val, res.rejected, res.named
}

// inboundResult is what one inbound run measured.
type inboundResult struct {
	val       float64     // replica 0's final validation loss
	rejected  []Rejection // what the honest replicas dropped
	named     []string    // whom the honest replicas named offenders
	evals     int         // replica 0's forward passes of the held-out batch
	syncBytes int64       // what replica 0 sent for synchronisation
}

// result trains r and returns what it measured.
func (r inboundRun) result(t *testing.T) inboundResult {
	t.Helper()
	cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	cfg.Train.Steps, cfg.Train.Batch, cfg.Train.MicroBatches = r.steps, 2*r.n, 1
	cfg.Sync.Mode, cfg.Sync.InnerSteps, cfg.Sync.Aggregate, cfg.Sync.Score, cfg.Sync.Zero = r.sync, 3, r.rule, r.score, r.zero
	if r.frags > 0 {
		cfg.Sync.Fragments = r.frags
	}
	L := cfg.Train.Model.NumLayers()
	var names []string
	var plan Plan
	bad := map[string]bool{}
	S := max(r.stages, 1)
	for i := range r.n {
		var rep []StagePlan
		for st := range S {
			name := fmt.Sprintf("r%d", i)
			if st > 0 {
				name = fmt.Sprintf("r%d.%d", i, st)
			}
			names = append(names, name)
			bad[name] = i >= r.n-r.bad
			rep = append(rep, StagePlan{Node: name, First: L * st / S, Last: L * (st + 1) / S})
		}
		plan.Replicas = append(plan.Replicas, rep)
	}
	net := NewInMemory(names...)
	defer net.Close()
	run, err := NewLocalRun(cfg, plan, testData(), func(node string) Transport {
		if bad[node] {
			return scaler{Transport: net.Peer(node), s: r.scaleBy}
		}
		return net.Peer(node)
	})
	if err != nil {
		t.Fatal(err)
	}
	for run.StepsDone() < cfg.Train.Steps {
		if _, err := run.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	var res inboundResult
	if res.val, err = run.Evaluate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range r.n - r.bad { // what the honest replicas report
		rej, off := run.ReportedBy(i)
		res.rejected, res.named = append(res.rejected, rej...), append(res.named, off...)
	}
	w := run.Workers()[0]
	_, res.syncBytes = w.BytesSent()
	if w.scorer != nil {
		res.evals = w.scorer.evals
	} else if w.onDemand != nil && w.onDemand.s != nil {
		res.evals = w.onDemand.s.evals
	}
	return res
}

// TestRepeatOffenderIsNamed: a replica of three whose contributions every sync drops
// (its update times −15) is named an offender by both honest workers, once each, after
// OffenderAfter syncs; in an all-honest run nobody is.
func TestRepeatOffenderIsNamed(t *testing.T) {
	for _, sync := range []jobspec.Sync{jobspec.SyncDiLoCo, jobspec.SyncEveryStep} {
		r := inboundRun{sync: sync, rule: jobspec.AggregateMean, n: 3, steps: 12, scaleBy: -15}
		if _, _, named := r.trainNamed(t); len(named) != 0 {
			t.Errorf("%s all honest: named %v", sync, named)
		}
		r.bad = 1
		_, _, named := r.trainNamed(t)
		if fmt.Sprint(named) != "[r2 r2]" {
			t.Errorf("%s: named %v, want r2 by each honest worker", sync, named)
		}
	}
}

// TestOffenderWatchNeedsConsecutiveSyncs: rejections separated by a sync that accepted
// the member do not add up; OffenderAfter in a row name it once.
func TestOffenderWatchNeedsConsecutiveSyncs(t *testing.T) {
	o := newOffenderWatch()
	bad := []Rejection{{Member: "x"}}
	for range OffenderAfter - 1 {
		if got := o.observe(bad, true); got != nil {
			t.Fatalf("named %v too early", got)
		}
	}
	o.observe(nil, true) // accepted once: the streak starts again
	for range OffenderAfter - 1 {
		if got := o.observe(bad, true); got != nil {
			t.Fatalf("named %v after an accepted sync", got)
		}
	}
	o.observe(nil, false) // no sync: nothing learned
	if got := o.observe(bad, true); fmt.Sprint(got) != "[x]" {
		t.Fatalf("named %v, want [x]", got)
	}
	if got := o.observe(bad, true); got != nil {
		t.Fatalf("named %v twice", got)
	}
}

// TestInboundPoisonIsBounded is the second acceptance for one attacker of three:
// a replica that sends its own update times −15 each sync (inside the 16× norm bound)
// leaves an honest replica's validation loss within 3% of an all-honest run, under DiLoCo
// and every-step sync and with every rule, the default (mean) included.
func TestInboundPoisonIsBounded(t *testing.T) {
	skipUnderRace(t)
	for _, sync := range []jobspec.Sync{jobspec.SyncDiLoCo, jobspec.SyncEveryStep} {
		for _, rule := range jobspec.Aggregates() {
			r := inboundRun{sync: sync, rule: rule, n: 3, steps: 24, scaleBy: -15}
			honest, _ := r.train(t)
			r.bad = 1
			val, rejected := r.train(t)
			t.Logf("%s %s 1 of 3: val %.4f, all honest %.4f (%+.1f%%), %d rejections", sync, rule, val, honest, 100*(val-honest)/honest, len(rejected))
			if math.IsNaN(val) || (val-honest)/honest > 0.03 {
				t.Errorf("%s %s 1 of 3: val %.4f, all honest %.4f", sync, rule, val, honest)
			}
			for _, rej := range rejected {
				if rej.Member != "r2" {
					t.Errorf("%s %s: an honest replica was dropped: %+v", sync, rule, rej)
				}
			}
		}
	}
}

// TestCollusionIsBoundedByHeldOutScore is issue 25's bound on colluders: two replicas of
// four that send their own update ×−15 (inside the norm bound) or reversed (×−1, as
// central as an honest one), too long (×15), shrunk (×0.05) or, under DiLoCo, a little
// short (×0.6) leave an honest replica's validation loss within 3% of an all-honest run
// with every rule, under the default held-out scoring (auto): DiLoCo's outer steps are
// scored, every-step sync's and ZeRO-1's collectives when their norms spread over
// GradientSpread or their contributions pull apart (ZeRO-1's colluders' parameter chunks
// the honest members refuse and update themselves). The honest workers drop only the
// colluders and name both offenders; the all-honest runs drop nothing (scoring keeps
// honest bits).
func TestCollusionIsBoundedByHeldOutScore(t *testing.T) {
	skipUnderRace(t)
	for _, c := range []struct {
		sync jobspec.Sync
		zero int
	}{{jobspec.SyncDiLoCo, 0}, {jobspec.SyncEveryStep, 0}, {jobspec.SyncEveryStep, 1}} {
		for _, rule := range jobspec.Aggregates() {
			if c.zero > 0 && rule != jobspec.AggregateMean {
				continue // ZeRO gathers the same way under every rule: the mean stands for them
			}
			r := inboundRun{sync: c.sync, rule: rule, n: 4, steps: 24, zero: c.zero}
			honest, rej := r.train(t)
			if len(rej) != 0 {
				t.Errorf("%s %s all honest: dropped %v", c.sync, rule, rej)
			}
			r.bad = 2
			// ×−15 with every rule; the other attacks with the mean only (every rule drops
			// the same colluders: the table in docs/PERFORMANCE.md has them all), to keep
			// the test cheap.
			attacks := []float32{-15}
			if rule == jobspec.AggregateMean {
				// Reversed: every-step sync scores it because it pulls apart (pullApart).
				// ×15: its norms spread over GradientSpread; under DiLoCo the held-out
				// loss chooses the length (outerLength). Without these +15% to +21% (sync
				// ×−1, ×15), +6.2% (DiLoCo ×15). ×0.05: under the lower median of the norms
				// the honest contributions were dropped as outsized (+22%; DiLoCo +31%).
				attacks = append(attacks, -1, 15, 0.05)
			}
			if rule == jobspec.AggregateMean && c.zero > 0 {
				// Inside every claimed-norm check of ZeRO's reduce-scatter: caught where the
				// owner of a chunk sees its contributions pull apart (+4.4% without).
				attacks = append(attacks, -3)
			}
			if rule == jobspec.AggregateMean && c.sync == jobspec.SyncDiLoCo {
				// A shrink inside the former 2× LengthSpread: +10.3%.
				attacks = append(attacks, 0.6)
			}
			for _, by := range attacks {
				r.scaleBy = by
				val, rejected, named := r.trainNamed(t)
				t.Logf("%s zero %d %s 2 of 4 ×%g: val %.4f, all honest %.4f (%+.1f%%), %d rejections, named %v", c.sync, c.zero, rule, by, val, honest, 100*(val-honest)/honest, len(rejected), named)
				if math.IsNaN(val) || (val-honest)/honest > 0.03 {
					t.Errorf("%s %s 2 of 4 ×%g: val %.4f, all honest %.4f", c.sync, rule, by, val, honest)
				}
				for _, x := range rejected {
					if x.Member != "r2" && x.Member != "r3" {
						t.Errorf("%s %s ×%g: an honest replica was dropped: %+v", c.sync, rule, by, x)
					}
				}
				slices.Sort(named)
				if fmt.Sprint(named) != "[r2 r2 r3 r3]" {
					t.Errorf("%s %s ×%g: named %v, want r2 and r3 by each honest worker", c.sync, rule, by, named)
				}
			}
		}
	}
}

// TestShrunkUpdateIsDropped: a replica of three that sends its update ×0.05 passes the
// norm and distance checks and lowers the held-out loss a little, diluting the mean
// (+13% under DiLoCo); under the defaults its score is under ScoreFloor of the median's
// and it is dropped: within 3% of all-honest, only it dropped.
func TestShrunkUpdateIsDropped(t *testing.T) {
	r := inboundRun{sync: jobspec.SyncDiLoCo, rule: jobspec.AggregateMean, n: 3, steps: 24, scaleBy: 0.05}
	honest, _ := r.train(t)
	r.bad = 1
	val, rejected := r.train(t)
	t.Logf("diloco 1 of 3 ×0.05: val %.4f, all honest %.4f (%+.1f%%), %d rejections", val, honest, 100*(val-honest)/honest, len(rejected))
	if math.IsNaN(val) || (val-honest)/honest > 0.03 {
		t.Errorf("diloco 1 of 3 ×0.05: val %.4f, all honest %.4f", val, honest)
	}
	for _, x := range rejected {
		if x.Member != "r2" {
			t.Errorf("an honest replica was dropped: %+v", x)
		}
	}
}

// TestInboundPoisonTable prints the in-bound poisoning table of docs/PERFORMANCE.md: an
// honest replica's validation loss all honest and attacked, per sync mode (DiLoCo,
// every-step sync, ZeRO-1), rule and attack, one row per held-out scoring setting, with
// what the all-honest run cost (go test ./parallel -run TestInboundPoisonTable -v
// -inbound-table; -inbound-scores off,auto,on picks the settings).
func TestInboundPoisonTable(t *testing.T) {
	if !*inboundTable {
		t.Skip("the table takes a while: -inbound-table")
	}
	modes := []struct {
		name string
		sync jobspec.Sync
		zero int
	}{{"diloco", jobspec.SyncDiLoCo, 0}, {"sync", jobspec.SyncEveryStep, 0}, {"zero-1", jobspec.SyncEveryStep, 1},
		{"zero-2", jobspec.SyncEveryStep, 2}, {"streaming", jobspec.SyncStreaming, 0}}
	head := "| sync | score | rule | attackers | all honest | held-out passes, bytes (honest) |"
	for _, s := range inboundAttacks() {
		head += fmt.Sprintf(" ×%g |", s)
	}
	t.Log(strings.ReplaceAll(head, "×-", "×−"))
	want := strings.Split(*inboundModeList, ",")
	for _, m := range modes {
		if slices.Contains(want, m.name) {
			t.Run(m.name, func(t *testing.T) { inboundTableRows(t, m.name, m.sync, m.zero) })
		}
	}
}

var (
	inboundModeList   = flag.String("inbound-modes", "diloco,sync,zero-1,zero-2,streaming", "the sync modes TestInboundPoisonTable runs, comma-separated")
	inboundAttackList = flag.String("inbound-attacks", "-15,-1,-3,15,0.05,0.6,1000,0.5,0.75,0.9,1.25,2,4", "the attackers' scalings TestInboundPoisonTable runs, comma-separated")
	inboundRuleList   = flag.String("inbound-rules", "", "the rules TestInboundPoisonTable runs, comma-separated (empty: every rule)")
	inboundStages     = flag.Int("inbound-stages", 1, "the pipeline stages per replica TestInboundPoisonTable runs (more than one: scored with three replicas or more, under every mode, as one stage is)")
	inboundSizeList   = flag.String("inbound-sizes", "1/3,2/4", "the attackers of replicas TestInboundPoisonTable runs, comma-separated")
)

// inboundAttacks is the scalings of -inbound-attacks.
func inboundAttacks() []float32 {
	var out []float32
	for _, f := range strings.Split(*inboundAttackList, ",") {
		var v float32
		if _, err := fmt.Sscan(f, &v); err == nil {
			out = append(out, v)
		}
	}
	return out
}

// inboundRules is the rules of -inbound-rules.
func inboundRules() []jobspec.Aggregate {
	if *inboundRuleList == "" {
		return jobspec.Aggregates()
	}
	var out []jobspec.Aggregate
	for _, r := range strings.Split(*inboundRuleList, ",") {
		out = append(out, jobspec.Aggregate(r))
	}
	return out
}

// inboundSizes is the (replicas, attackers) pairs of -inbound-sizes.
func inboundSizes() [][2]int {
	var out [][2]int
	for _, s := range strings.Split(*inboundSizeList, ",") {
		var bad, n int
		if _, err := fmt.Sscanf(s, "%d/%d", &bad, &n); err == nil {
			out = append(out, [2]int{n, bad})
		}
	}
	return out
}

// inboundTableRows logs the table's rows of one sync mode.
func inboundTableRows(t *testing.T, mode string, sync jobspec.Sync, zero int) {
	attacks := inboundAttacks()
	{
		for _, score := range inboundScores() {
			for _, rule := range inboundRules() {
				for _, nb := range inboundSizes() {
					r := inboundRun{sync: sync, zero: zero, rule: rule, n: nb[0], steps: 24, score: score, stages: *inboundStages}
					honest := r.result(t)
					row := fmt.Sprintf("| %s | %s | %s | %d of %d | %.4f | %d, %d |", mode, score, rule, nb[1], nb[0], honest.val, honest.evals, honest.syncBytes)
					if len(honest.rejected) > 0 {
						row += fmt.Sprintf(" (honest run dropped %d)", len(honest.rejected))
					}
					r.bad = nb[1]
					for _, s := range attacks {
						r.scaleBy = s
						res := r.result(t)
						row += fmt.Sprintf(" %+.1f%%%s |", 100*(res.val-honest.val)/honest.val, namedMark(res.named, nb[0], nb[1]))
					}
					t.Log(row)
				}
			}
		}
	}
}

var inboundScoreList = flag.String("inbound-scores", "auto", "the score settings TestInboundPoisonTable runs, comma-separated")

func inboundScores() []jobspec.Score {
	var out []jobspec.Score
	for _, s := range strings.Split(*inboundScoreList, ",") {
		out = append(out, jobspec.Score(s))
	}
	return out
}

// namedMark is "" when each honest replica named every attacker and nobody else, "‼" when
// an honest member was named, "○" when an attacker went unnamed by some honest replica.
func namedMark(named []string, n, bad int) string {
	count := map[string]int{}
	for _, m := range named {
		count[m]++
	}
	for i := range n - bad {
		if count[fmt.Sprintf("r%d", i)] > 0 {
			return " ‼"
		}
	}
	for i := n - bad; i < n; i++ {
		if count[fmt.Sprintf("r%d", i)] != n-bad {
			return " ○"
		}
	}
	return ""
}

// TestContestedNormCheckIsScored: under the default score (auto), which does not score
// every-step sync or ZeRO, two colluders of four that shrink their gradient (×0.05) owned
// the norm check's lower median: the honest contributions were dropped as outsized and
// the honest members named each other (+30%). A contested check is now scored (and its
// contributions counted by direction), so the honest members drop and name only the
// colluders, shrunk or blown up (×1000), within 3% of all-honest, and the all-honest run
// (never contested) drops nothing.
func TestContestedNormCheckIsScored(t *testing.T) {
	for _, zero := range []int{0, 1} {
		r := inboundRun{sync: jobspec.SyncEveryStep, rule: jobspec.AggregateMean, n: 4, steps: 24, zero: zero}
		honest, rej := r.train(t)
		if len(rej) != 0 {
			t.Errorf("zero %d all honest: dropped %v", zero, rej)
		}
		r.bad = 2
		attacks := []float32{0.05, 1000}
		if zero > 0 {
			attacks = attacks[:1] // ZeRO gathers as sync does once contested
		}
		for _, by := range attacks {
			r.scaleBy = by
			val, rejected, named := r.trainNamed(t)
			t.Logf("zero %d 2 of 4 ×%g: val %.4f, all honest %.4f (%+.1f%%), %d rejections, named %v", zero, by, val, honest, 100*(val-honest)/honest, len(rejected), named)
			if math.IsNaN(val) || (val-honest)/honest > 0.03 {
				t.Errorf("zero %d ×%g: val %.4f, all honest %.4f", zero, by, val, honest)
			}
			for _, x := range rejected {
				if x.Member != "r2" && x.Member != "r3" {
					t.Errorf("zero %d ×%g: an honest replica was dropped: %+v", zero, by, x)
					break
				}
			}
			slices.Sort(named)
			if fmt.Sprint(named) != "[r2 r2 r3 r3]" {
				t.Errorf("zero %d ×%g: named %v, want r2 and r3 by each honest worker", zero, by, named)
			}
		}
	}
}

// TestConvergedHonestRunDropsNothing: honest replicas trained until the validation loss
// is near 0.06 (DiLoCo, H = 5) or 0.08 (every-step sync under score: auto, scored where
// the gradients pull apart) drop nothing and name nobody, with three replicas and with
// four. Near convergence an honest update removes about nothing from the held-out loss:
// under DiLoCo one batch of ScoreWindows windows said "raises it by 0.01" of an honest
// update in 9 of 60 outer steps (now judged with its standard error, ScoreNoise); under
// sync, at steps where the gradients pull apart, an honest gradient's step of 10·lr
// raised it at two to four standard errors (72 reports in 300 steps) while no
// contribution clearly lowered it: no direction the batch agrees on (now nothing but a
// loss that is not a number is dropped then).
func TestConvergedHonestRunDropsNothing(t *testing.T) {
	skipUnderRace(t)
	for _, c := range []struct {
		sync jobspec.Sync
		n    int
	}{{jobspec.SyncDiLoCo, 3}, {jobspec.SyncDiLoCo, 4}, {jobspec.SyncEveryStep, 4}} {
		cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
		cfg.Train.Steps, cfg.Train.Batch, cfg.Train.MicroBatches = 300, 2*c.n, 1
		cfg.Sync.Mode, cfg.Sync.InnerSteps = c.sync, 5
		L := cfg.Train.Model.NumLayers()
		var names []string
		var plan Plan
		for i := range c.n {
			names = append(names, fmt.Sprintf("r%d", i))
			plan.Replicas = append(plan.Replicas, []StagePlan{{Node: names[i], Last: L}})
		}
		net := NewInMemory(names...)
		run, err := NewLocalRun(cfg, plan, testData(), func(node string) Transport { return net.Peer(node) })
		if err != nil {
			t.Fatal(err)
		}
		for run.StepsDone() < cfg.Train.Steps {
			if _, err := run.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		val, err := run.Evaluate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		net.Close()
		evals := 0
		if w := run.Workers()[0]; w.onDemand != nil && w.onDemand.s != nil {
			evals = w.onDemand.s.evals
		} else if w.scorer != nil {
			evals = w.scorer.evals
		}
		t.Logf("%s, %d replicas: validation loss %.4f after %d steps (%d held-out passes)", c.sync, c.n, val, cfg.Train.Steps, evals)
		if val > 0.1 {
			t.Errorf("%s, %d replicas: validation loss %.4f, the run did not converge as this test needs", c.sync, c.n, val)
		}
		if c.sync == jobspec.SyncEveryStep && evals == 0 {
			t.Errorf("sync: nothing was scored, the test tests nothing")
		}
		for i := range c.n {
			rej, named := run.ReportedBy(i)
			if len(rej) > 0 || len(named) > 0 {
				t.Errorf("%s, %d replicas: replica %d dropped %d honest contributions (first %+v), named %v", c.sync, c.n, i, len(rej), rej[0], named)
			}
		}
	}
}

// TestMildPairsAreBounded is issue 25's bound on colluders that send their own update at
// a mildly wrong size, inside every check that drops a contribution: two of four under
// DiLoCo ×0.75 (inside the former 1.4× LengthSpread, the held-out score sees a shrunk
// update still helps: +6.1% to +6.4%) and under every-step sync ×4 (inside the 8×
// GradientSpread, pulling with the honest pair: +4.6% with the mean, +3.0% to +3.4% with
// the robust rules), and ZeRO-1 ×4 (+1.2%); and ZeRO-1 replicas of two pipeline stages
// ×0.75, whose parameter chunks (shrunk too) held only small weights and passed the former
// 16·lr·(1+|θ|) step bound (+5.0% to +5.2%; paramLimit now). With every rule the honest
// replicas' loss stays within 3% of all-honest, nobody honest is dropped or named, and
// the all-honest runs drop nothing.
func TestMildPairsAreBounded(t *testing.T) {
	skipUnderRace(t)
	for _, c := range []struct {
		sync   jobspec.Sync
		zero   int
		by     float32
		stages int
	}{{jobspec.SyncDiLoCo, 0, 0.75, 1}, {jobspec.SyncEveryStep, 0, 4, 1}, {jobspec.SyncEveryStep, 1, 4, 1}, {jobspec.SyncEveryStep, 1, 0.75, 2}} {
		for _, rule := range jobspec.Aggregates() {
			if c.zero > 0 && c.stages == 1 && rule != jobspec.AggregateMean {
				continue // ZeRO gathers the same way under every rule: the mean stands for them
			}
			r := inboundRun{sync: c.sync, rule: rule, n: 4, steps: 24, zero: c.zero, stages: c.stages}
			honest, rej := r.train(t)
			if len(rej) != 0 {
				t.Errorf("%s zero %d %s all honest: dropped %v", c.sync, c.zero, rule, rej)
			}
			r.bad, r.scaleBy = 2, c.by
			val, rejected, named := r.trainNamed(t)
			t.Logf("%s zero %d %s %d stages 2 of 4 ×%g: val %.4f, all honest %.4f (%+.1f%%), %d rejections, named %v", c.sync, c.zero, rule, c.stages, c.by, val, honest, 100*(val-honest)/honest, len(rejected), named)
			if math.IsNaN(val) || (val-honest)/honest > 0.03 {
				t.Errorf("%s zero %d %s %d stages 2 of 4 ×%g: val %.4f, all honest %.4f (%+.1f%%)", c.sync, c.zero, rule, c.stages, c.by, val, honest, 100*(val-honest)/honest)
			}
			attacker := func(node string) bool { // r2, r3 and their later stages' nodes (r2.1)
				rep, _, _ := strings.Cut(node, ".")
				return rep == "r2" || rep == "r3"
			}
			for _, x := range rejected {
				if !attacker(x.Member) {
					t.Errorf("%s %s ×%g: an honest replica was dropped: %+v", c.sync, rule, c.by, x)
				}
			}
			for _, m := range named {
				if !attacker(m) {
					t.Errorf("%s %s ×%g: honest %s named", c.sync, rule, c.by, m)
				}
			}
		}
	}
}

// TestStreamingIsScored: streaming DiLoCo's outer steps were not scored (their
// collectives run beside the next steps, which move the anchors), and one reversed replica
// of three with the mean cost +6.9%, two of four ×−15 +591% (×0.05 +28.5%). Each
// fragment's pseudo-gradient is now scored and its length ruled as DiLoCo's, from the step
// and anchors every replica shared when it was launched: within 3% of all-honest, the
// all-honest runs drop nothing, and the attackers, and only they, are named by both honest
// workers (their rejections are reported at the step that applies the update).
func TestStreamingIsScored(t *testing.T) {
	for _, c := range []struct {
		n, bad int
		by     float32
	}{{3, 1, -1}, {4, 2, -15}, {4, 2, 0.05}} {
		r := inboundRun{sync: jobspec.SyncStreaming, rule: jobspec.AggregateMean, n: c.n, steps: 24}
		honest, rej := r.train(t)
		if len(rej) != 0 {
			t.Errorf("%d replicas all honest: dropped %v", c.n, rej)
		}
		r.bad, r.scaleBy = c.bad, c.by
		val, rejected, named := r.trainNamed(t)
		t.Logf("streaming %d of %d ×%g: val %.4f, all honest %.4f (%+.1f%%), %d rejections, named %v", c.bad, c.n, c.by, val, honest, 100*(val-honest)/honest, len(rejected), named)
		if math.IsNaN(val) || (val-honest)/honest > 0.03 {
			t.Errorf("streaming %d of %d ×%g: val %.4f, all honest %.4f", c.bad, c.n, c.by, val, honest)
		}
		honestDrops := 0
		for _, x := range rejected {
			if x.Member != "r2" && x.Member != "r3" {
				honestDrops++
			}
		}
		// Under ×−15 the honest updates of a step after a refused outer step sometimes
		// raise the held-out loss from the shared anchor (8 of 60 drops): they are dropped
		// that step, never named.
		if honestDrops > 0 && c.by != -15 {
			t.Errorf("streaming %d of %d ×%g: %d honest contributions dropped", c.bad, c.n, c.by, honestDrops)
		}
		if mark := namedMark(named, c.n, c.bad); mark != "" {
			t.Errorf("streaming %d of %d ×%g: named %v (%s)", c.bad, c.n, c.by, named, mark)
		}
	}
}
