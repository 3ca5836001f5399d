package parallel

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// auditEvery draws every member of a four-replica gather for an audit.
const auditEvery = 4

// TestAuditKeepsHonestWork: in an honest four-replica run where every member recomputes
// every other's contribution at every gather, nothing is dropped (the recomputation is
// the member's own work, to the tolerance), under DiLoCo (its inner steps from zero
// moments) and every-step sync, with equal and unequal batches, and through the int8 and
// fp16 codecs (sent without error feedback). A recomputation that
// missed one input (the step, the batch offset, the weights, the moments) would drop
// honest members here.
func TestAuditKeepsHonestWork(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    jobspec.Sync
		codec   jobspec.Codec
		batches []int
	}{
		{"diloco", jobspec.SyncDiLoCo, jobspec.CodecNone, nil},
		{"sync", jobspec.SyncEveryStep, jobspec.CodecNone, nil},
		{"diloco-unequal", jobspec.SyncDiLoCo, jobspec.CodecNone, []int{4, 8, 12, 8}},
		{"sync-unequal", jobspec.SyncEveryStep, jobspec.CodecNone, []int{4, 8, 12, 8}},
		{"diloco-int8", jobspec.SyncDiLoCo, jobspec.CodecInt8, nil},
		{"sync-fp16", jobspec.SyncEveryStep, jobspec.CodecFP16, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "diloco" && tc.name != "sync-unequal" {
				skipUnderRace(t) // two cases run the audits' concurrency under -race
			}
			t.Parallel()
			run := auditedRun(t, tc.mode, tc.codec, tc.batches, auditEvery)
			for run.StepsDone() < 9 {
				if _, err := run.Step(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if rej := run.Rejected(); len(rej) > 0 {
				t.Fatalf("an honest run dropped %d contributions under audit, the first: %+v", len(rej), rej[0])
			}
			// Every member drawn at every gather: each recomputes the three others.
			gathers := 9
			if tc.mode == jobspec.SyncDiLoCo {
				gathers = 3
			}
			if got, want := run.Audited(), gathers*4*3; got != want {
				t.Fatalf("the workers recomputed %d contributions, want %d", got, want)
			}
			for _, w := range run.Workers() {
				if w.auditWait.Load() <= 0 {
					t.Fatalf("%s's audited gathers wait no longer for the others' results", w.Self())
				}
			}
		})
	}
}

// auditedRun is four signed one-stage replicas (DiLoCo H = 3, 24 steps at most) in
// mode with codec, with batches (nil: 8 each), audited at rate audit.
func auditedRun(tb testing.TB, mode jobspec.Sync, codec jobspec.Codec, batches []int, audit float64) *LocalRun {
	tb.Helper()
	cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	cfg.Train.Steps, cfg.Train.Batch, cfg.Train.MicroBatches = 24, 8, 2
	cfg.Sync.Mode, cfg.Sync.InnerSteps, cfg.Sync.Audit, cfg.Sync.Codec = mode, 3, audit, codec
	keys, ids := nodeKeys(tb, 4)
	plan := Plan{Batches: batches}
	for _, id := range ids {
		plan.Replicas = append(plan.Replicas, []StagePlan{{Node: id, Last: cfg.Train.Model.NumLayers()}})
	}
	net := NewInMemory(ids...)
	tb.Cleanup(func() { net.Close() })
	run, err := NewLocalRun(cfg, plan, testData(), func(node string) Transport {
		return signingPeer{Transport: net.Peer(node), key: keys[slices.Index(ids, node)]}
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { run.Close() })
	return run
}

// BenchmarkAuditedOuterStep is one DiLoCo outer step (3 inner steps and the gather) of
// four in-memory replicas on this machine's cores, audited at rate 0 (none), 1 (one
// member drawn per gather on average: each member recomputes 3/4 of a replica's work)
// and 4 (every member: each recomputes the three others'). docs/PERFORMANCE.md, "Audits".
func BenchmarkAuditedOuterStep(b *testing.B) {
	for _, audit := range []float64{0, 1, 4} {
		b.Run(fmt.Sprintf("audit=%g", audit), func(b *testing.B) {
			run := auditedRun(b, jobspec.SyncDiLoCo, jobspec.CodecNone, nil, audit)
			for b.Loop() {
				if run.StepsDone()+3 > 24 {
					b.StopTimer()
					run = auditedRun(b, jobspec.SyncDiLoCo, jobspec.CodecNone, nil, audit)
					b.StartTimer()
				}
				for range 3 {
					if _, err := run.Step(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// TestAuditConfig: the audit rate is bounded, and refused with a codec, ZeRO or streaming,
// each error naming the field.
func TestAuditConfig(t *testing.T) {
	for _, tc := range []struct {
		set  func(*SyncConfig)
		want string
	}{
		{func(c *SyncConfig) { c.Audit = -1 }, "audit must be ≥ 0"},
		{func(c *SyncConfig) { c.Audit = math.NaN() }, "audit must be ≥ 0"},
		{func(c *SyncConfig) { c.Audit = MaxAudit + 1 }, "audit must be ≥ 0"},
		{func(c *SyncConfig) { c.Audit, c.Codec = 1, jobspec.CodecTopK }, "audit needs codec none, fp16 or int8"},
		{func(c *SyncConfig) { c.Audit, c.Mode, c.Zero = 1, jobspec.SyncEveryStep, 1 }, "audit needs zero 0"},
		{func(c *SyncConfig) { c.Audit, c.Mode = 1, jobspec.SyncStreaming }, "audit needs mode diloco or sync"},
	} {
		c := DefaultSyncConfig()
		tc.set(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error with %q", c, err, tc.want)
		}
	}
	c := DefaultSyncConfig()
	c.Audit = 1
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestAuditDrawIsSharedAndFresh: every member draws the same members from the same
// contributions, a different contribution anywhere draws anew, and the rate is what is
// drawn on average.
func TestAuditDrawIsSharedAndFresh(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	all := [][]float32{{1, 2}, {3, 4}, {5, 6}, {7, 8}}
	seed := auditSeed(members, all)
	if seed != auditSeed(members, slices.Clone(all)) {
		t.Fatal("the same contributions give another seed")
	}
	other := slices.Clone(all)
	other[2] = []float32{5, 6.0000005}
	if seed == auditSeed(members, other) {
		t.Fatal("a changed contribution keeps the seed")
	}
	drawn := 0
	for i := range 4000 {
		all[0][0] = float32(i)
		drawn += len(auditDraw(auditSeed(members, all), members, all, 1))
	}
	if drawn < 3700 || drawn > 4300 {
		t.Fatalf("rate 1 drew %d members in 4000 gathers, want about 4000", drawn)
	}
}

// TestAuditStopsStaleEcho is the replay attack (TestStaleEcho) under audits that draw
// every member of every gather: each replay is recomputed before it is aggregated, its
// author dropped, named at once, banned from the run's later gathers and convicted by a
// leader on the evidence of either honest member (convictNamed), while neither honest
// member drops the other and the same evidence convicts no honest member. The honest
// replicas end within 3% of an all-honest run's validation loss: two colluders of four
// under DiLoCo and every-step sync with every rule (and DiLoCo through the int8 codec),
// one of three under DiLoCo's mean.
// Every colluder is convicted at its first replay, and the leader's next plan (the job's
// batch over the honest pair, from the checkpoint of that step: replanning) goes on.
// Without audits nobody is convicted and the DiLoCo runs end 6.1–12.0% over
// (docs/security.md, "Replaying what was seen"); with a sampled rate the replays drawn
// late get in first (TestStaleEcho's -stale-echo-audit measures them).
func TestAuditStopsStaleEcho(t *testing.T) {
	type tc struct {
		n     int
		mode  jobspec.Sync
		rule  jobspec.Aggregate
		codec jobspec.Codec
	}
	cases := []tc{{3, jobspec.SyncDiLoCo, jobspec.AggregateMean, jobspec.CodecNone}, {4, jobspec.SyncDiLoCo, jobspec.AggregateMean, jobspec.CodecInt8}}
	for _, mode := range []jobspec.Sync{jobspec.SyncDiLoCo, jobspec.SyncEveryStep} {
		for _, rule := range []jobspec.Aggregate{jobspec.AggregateMean, jobspec.AggregateTrimmed, jobspec.AggregateMedian, jobspec.AggregateCenteredClip} {
			cases = append(cases, tc{4, mode, rule, jobspec.CodecNone})
		}
	}
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d-%s-%s-%s", c.n, c.mode, c.rule, c.codec), func(t *testing.T) {
			if i != 2 { // under -race one case (two colluders, DiLoCo's mean) runs the bans' concurrency
				skipUnderRace(t)
			}
			r := staleEchoRun(t, c.n, 24, c.mode, c.rule, c.codec, float64(c.n))
			for _, d := range r.drops {
				t.Error(d)
			}
			if len(r.convicted) != c.n-2 {
				t.Errorf("convicted %v, want the %d colluders %v", r.convicted, c.n-2, r.ids[2:])
			}
			// The first replay is at the second gather (the first has nothing earlier to
			// replay): every colluder is convicted there.
			first := 2
			if c.mode == jobspec.SyncDiLoCo {
				first = 2 * *staleEchoInner
			}
			for k, at := range r.convictedAt {
				if at > first {
					t.Errorf("%s convicted at step %d, after its first replay (step %d)", r.convicted[k], at, first)
				}
			}
			if d := (r.got - r.want) / r.want; d > 0.03 {
				t.Errorf("validation loss %.4f, all honest %.4f: %+.1f%%, over 3%%", r.got, r.want, 100*d)
			}
			if len(r.evidence) == 0 {
				t.Fatal("the leader convicted nobody on evidence")
			}
			held := r.evidence[0]
			if ok, why, err := VerifyEvidence(held.cfg, held.plan, testData(), held.ev, r.ids[1]); ok || err != nil {
				t.Errorf("the audit's evidence convicted the other honest member (%s) or failed: %v", why, err)
			}
			t.Logf("validation loss %.4f, all honest %.4f (%+.1f%%); convicted at steps %v", r.got, r.want, 100*(r.got-r.want)/r.want, r.convictedAt)
		})
	}
}

// deadlineTransport reports the deadline each Recv is given.
type deadlineTransport struct {
	Transport
	left time.Duration
}

func (d *deadlineTransport) Recv(ctx context.Context, _ string, _ frame.Key) (*frame.Frame, error) {
	dl, _ := ctx.Deadline()
	d.left = time.Until(dl)
	return &frame.Frame{}, nil
}

// TestAuditWaitExtendsTheStall: after its audits a gather waits for the result digests
// the stall timeout plus what the audits may take the others; elsewhere the timeout alone.
func TestAuditWaitExtendsTheStall(t *testing.T) {
	d := &deadlineTransport{}
	st := stallTransport{Transport: d, timeout: time.Minute}
	if _, err := st.Recv(context.Background(), "a", frame.Key{}); err != nil || d.left > time.Minute {
		t.Fatalf("plain wait %v (%v), want at most the stall timeout", d.left, err)
	}
	if _, err := st.Recv(withStallExtra(context.Background(), time.Hour), "a", frame.Key{}); err != nil || d.left <= time.Hour {
		t.Fatalf("wait after audits %v (%v), want over an hour and a minute", d.left, err)
	}
	var w Worker
	w.noteCompute(80 * time.Millisecond)
	w.noteCompute(160 * time.Millisecond)
	if got := time.Duration(w.computeEMA.Load()); got != 90*time.Millisecond {
		t.Fatalf("compute average %v, want 90ms", got)
	}
}

// TestProvenDropNamesAtOnce: a failed audit names its member at the first drop, where a
// drop the checks judged names it only at the OffenderAfter-th in a row.
func TestProvenDropNamesAtOnce(t *testing.T) {
	o := newOffenderWatch()
	if got := o.observe([]Rejection{{Member: "a", Reason: "outlier"}}, true); len(got) != 0 {
		t.Fatalf("one judged drop named %v", got)
	}
	if got := o.observe([]Rejection{{Member: "b", Reason: "audit", Proven: true}}, true); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a failed audit named %v, want [b]", got)
	}
}

var (
	auditDump    = flag.String("audit-dump", "", "TestAuditAcrossKernels: write the recomputed outer step to this file")
	auditCompare = flag.String("audit-compare", "", "TestAuditAcrossKernels: compare the recomputed outer step with this file's")
)

// TestAuditAcrossKernels measures what AuditTolerance must absorb: one replica's DiLoCo
// outer step (H = 50 inner steps of the default model from its initial weights)
// recomputed by this build, written with -audit-dump and compared with -audit-compare
// against another kernel path's (MESHNODE_CPU=avx2 or generic, or a `-tags noasm` build;
// docs/security.md).
func TestAuditAcrossKernels(t *testing.T) {
	if *auditDump == "" && *auditCompare == "" {
		t.Skip("a measurement across builds: -audit-dump FILE, then -audit-compare FILE in the other build")
	}
	cfg := JobConfig{Train: DefaultTrainConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	cfg.Train.Steps, cfg.Sync.Audit = 300, 3
	plan := Plan{}
	for _, id := range []string{"a", "b", "c"} {
		plan.Replicas = append(plan.Replicas, []StagePlan{{Node: id, Last: cfg.Train.Model.NumLayers()}})
	}
	data, err := model.LoadDataset(jobspec.BuiltinGoStd, cfg.Train.Model.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(cfg, plan, "a", noTransport("a"), data)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got, err := w.recompute(context.Background(), "b", auditPoint{theta: flattenValues(w.runParams[0]), span: cfg.Sync.InnerSteps, outer: true})
	if err != nil {
		t.Fatal(err)
	}
	if *auditDump != "" {
		if err := os.WriteFile(*auditDump, appendF32(nil, got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if *auditCompare != "" {
		raw, err := os.ReadFile(*auditCompare)
		if err != nil {
			t.Fatal(err)
		}
		other := make([]float32, len(got))
		if err := decodeF32(other, raw); err != nil {
			t.Fatal(err)
		}
		differ := 0
		for i := range got {
			if got[i] != other[i] {
				differ++
			}
		}
		t.Logf("%s, one outer step of %d inner steps: %d of %d values differ, relative distance %.3g (tolerance %g)", kernels.GemmName(), cfg.Sync.InnerSteps, differ, len(got), relDistance(got, other), AuditTolerance)
	}
}

// TestAuditSeedHashesTheBytes: the seed is the SHA-256 of what its doc says, whatever the
// chunking: the bytes a leader hashes from evidence are those a worker hashed.
func TestAuditSeedHashesTheBytes(t *testing.T) {
	big := make([]float32, 40000) // over two chunks
	for i := range big {
		big[i] = float32(i) * 0.5
	}
	members := []string{"ab", "c"}
	var want []byte
	want = append(append(append(want, 2), "ab"...), 1)
	want = appendF32(want, big)
	want = append(append(want, 1), "c"...)
	want = append(want, 0)
	if got := auditSeed(members, [][]float32{big, nil}); got != sha256.Sum256(want) {
		t.Fatal("the seed is not the SHA-256 of the members' IDs, presence bytes and contributions")
	}
}

// TestBanOutlastsReadmit: a member an audit banned is never readmitted, and every-step
// sync's gathers run without it; a member the control plane retired (dead) stays in them,
// whose gather fails on it for a new plan as before.
func TestBanOutlastsReadmit(t *testing.T) {
	w := &Worker{peers: newPeerSet()}
	w.ban("b")
	w.applyBans()
	if got := w.peers.readmit("b"); len(got) != 0 {
		t.Fatalf("a banned member was readmitted: %v", got)
	}
	w.Retire("c")
	g := w.activeGroup(Group{Members: []string{"a", "b", "c", "d"}, Self: 3})
	if want := (Group{Members: []string{"a", "c", "d"}, Self: 2}); !slices.Equal(g.Members, want.Members) || g.Self != want.Self {
		t.Fatalf("active group %+v, want %+v", g, want)
	}
	if got := w.peers.readmit("c"); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("a retired (dead) member was not readmitted: %v", got)
	}
}

// TestScoreDropsAreAudited: in an audited gather the contributions the held-out score
// drops are recomputed too, after the draw (auditScoreDrops): one that is not its
// author's work is then proof, reported Proven and banned at once, where the score alone
// only counts towards a streak; one the draw already recomputed is not recomputed again,
// one that passes stays dropped and unproven, and an unaudited gather recomputes nothing.
func TestScoreDropsAreAudited(t *testing.T) {
	members := []string{"a", "b", "c", "d"}
	contribution := func() [][]float32 {
		return [][]float32{{1, 0}, {1, 0.1}, {0.9, 0}, {1, -0.1}}
	}
	// The score: c (2) and d (3) raise the held-out loss; a and b lower it.
	score := func(all [][]float32) ([]heldOutScore, error) {
		return []heldOutScore{{gain: 1, se: 0.01}, {gain: 1, se: 0.01}, {gain: -1, se: 0.01}, {gain: -1, se: 0.01}}, nil
	}
	for _, tc := range []struct {
		name    string
		drawn   []int    // what the draw recomputes
		lies    []int    // whose recomputation differs
		targets []int    // want: what the score's drops add
		proven  []string // want: members reported Proven
	}{
		{"a replay the score dropped", nil, []int{2}, []int{2, 3}, []string{"c"}},
		{"drawn already", []int{2}, nil, []int{3}, nil},
		{"drawn and caught", []int{2}, []int{2}, []int{3}, []string{"c"}},
		{"honest drops", nil, nil, []int{2, 3}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls [][]int
			var rejected []Rejection
			banned := map[string]bool{}
			pol := policy{score: score, reject: func(r Rejection) { rejected = append(rejected, r) }, ban: func(m string) { banned[m] = true }}
			pol.audit = func(_ []string, all [][]float32, _ [32]byte, targets []int) (map[int]string, []int, error) {
				drawn := targets
				if drawn == nil {
					drawn = tc.drawn
				}
				calls = append(calls, drawn)
				failed := map[int]string{}
				for _, m := range drawn {
					if all[m] == nil {
						t.Errorf("member %d recomputed without its contribution", m)
					}
					if slices.Contains(tc.lies, m) {
						failed[m] = "audit: not its work"
					}
				}
				return failed, drawn, nil
			}
			all := contribution()
			if _, err := judge(Group{Members: members, Self: 0}, all, pol); err != nil {
				t.Fatal(err)
			}
			if len(calls) != 2 || !slices.Equal(calls[1], tc.targets) {
				t.Fatalf("audits %v, want the draw then %v", calls, tc.targets)
			}
			var proven []string
			for _, r := range rejected {
				if r.Proven {
					proven = append(proven, r.Member)
					if !banned[r.Member] {
						t.Errorf("%s proven but not banned", r.Member)
					}
				}
			}
			if !slices.Equal(proven, tc.proven) {
				t.Errorf("proven %v (rejections %+v), want %v", proven, rejected, tc.proven)
			}
			if all[2] != nil || all[3] != nil || all[0] == nil || all[1] == nil {
				t.Errorf("kept %v: want a and b, the score's drops dropped", all)
			}
		})
	}
	// The score drops every contribution (none can be said to lower the held-out loss):
	// it names nobody, and nobody is recomputed beyond the draw.
	var calls [][]int
	nan := heldOutScore{gain: math.NaN()}
	pol := policy{score: func(all [][]float32) ([]heldOutScore, error) {
		return []heldOutScore{nan, nan, nan, nan}, nil
	}}
	pol.audit = func(_ []string, _ [][]float32, _ [32]byte, targets []int) (map[int]string, []int, error) {
		calls = append(calls, targets)
		return nil, targets, nil
	}
	if none, err := judge(Group{Members: members}, contribution(), pol); err != nil || !none || len(calls) != 1 {
		t.Errorf("every contribution scored out: none %v (%v), audits %v; want only the draw", none, err, calls)
	}
	// Unaudited: the score drops, nobody is recomputed or proven.
	var rejected []Rejection
	all := contribution()
	if _, err := judge(Group{Members: members}, all, policy{score: score, reject: func(r Rejection) { rejected = append(rejected, r) }}); err != nil {
		t.Fatal(err)
	}
	for _, r := range rejected {
		if r.Proven {
			t.Errorf("unaudited gather proved %+v", r)
		}
	}
	if len(rejected) != 2 {
		t.Errorf("rejections %+v, want the score's two", rejected)
	}
}

// TestAuditedResumeFromAnUnauditedCheckpoint: an audited DiLoCo epoch restored from a
// checkpoint an unaudited epoch wrote (the job's earlier plan was a pipeline, or the
// planner judged it unauditable) starts its first outer step from zero inner moments,
// as every recomputation of it does. Before the restore reset them, each member carried
// the unaudited epoch's AdamW moments into that step and every honest member's
// recomputation of another was 0.86 of its length away: the honest members convicted
// each other (testnet's audited colluders scenario, after a straggler rebalance resumed
// from a checkpoint of an unaudited epoch).
func TestAuditedResumeFromAnUnauditedCheckpoint(t *testing.T) {
	resumeAudited(t, 6, 9, 4*3)
}

// TestAuditedResumeBetweenOuterSteps: an audited DiLoCo epoch restored from a checkpoint
// of a step between two outer steps (here 7, with outer steps every 3: a checkpoint of a
// one-node epoch, or of a pipeline's, is at any step) takes its first outer step at the
// next multiple (9) over the inner steps since the restore (8–9) from the restored
// weights, and every member's recomputation covers those steps alone. Before the anchor's
// step was kept, the recomputation ran from step 6, three steps for two: the honest
// members convicted each other (node's TestJoinedNodeIsUsedAtTheNextPlan, whose second
// epoch resumed a one-node epoch's checkpoint between outer steps 100 and 150: 135 in a
// run here).
func TestAuditedResumeBetweenOuterSteps(t *testing.T) {
	resumeAudited(t, 7, 12, 2*4*3)
}

// unauditedCheckpoint is the weights and each replica's moments of an unaudited
// four-replica DiLoCo run (auditedRun, audit 0) after steps steps.
func unauditedCheckpoint(t *testing.T, steps int) (*model.TensorFile, map[int]*model.TensorFile) {
	t.Helper()
	first := auditedRun(t, jobspec.SyncDiLoCo, jobspec.CodecNone, nil, 0)
	for first.StepsDone() < steps {
		if _, err := first.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return snapshots(first)
}

// resumeAudited restores a four-replica run audited at every gather from
// unauditedCheckpoint(at), trains it to step until, and fails when it dropped anything
// or recomputed other than audited contributions.
func resumeAudited(t *testing.T, at, until, audited int) {
	t.Helper()
	weights, moments := unauditedCheckpoint(t, at)
	run := auditedRun(t, jobspec.SyncDiLoCo, jobspec.CodecNone, nil, auditEvery)
	for _, w := range run.Workers() {
		if err := w.Restore(weights, moments[w.Replica()], at); err != nil {
			t.Fatal(err)
		}
	}
	for run.StepsDone() < until {
		if _, err := run.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if rej := run.Rejected(); len(rej) > 0 {
		t.Fatalf("after the restore at step %d an honest run dropped %d contributions under audit, the first: %+v", at, len(rej), rej[0])
	}
	if got := run.Audited(); got != audited {
		t.Fatalf("the workers recomputed %d contributions, want %d", got, audited)
	}
}

// TestAuditEvidenceAfterAResumeBetweenOuterSteps: after a restore at step 7 (outer steps
// every 3), a member that sends its contribution scaled is proved a liar by the audits of
// the first outer step (inner steps 8–9), and the leader's judge convicts it from the
// evidence, which carries the anchor step every signature binds (Evidence.From); it does
// not convict an honest member from the same evidence. Evidence that claims another
// anchor step is forged (the signatures bind 7), as is evidence every member signed
// against the anchor alone (another strategy's digest), and a verifier of more inner
// steps than an outer step has is refused before anything is recomputed.
func TestAuditEvidenceAfterAResumeBetweenOuterSteps(t *testing.T) {
	weights, moments := unauditedCheckpoint(t, 7)
	collude := func(p signingPeer, _ []string) Transport { return resigner{signingPeer: p, s: 1.5} }
	set := func(c *JobConfig) { c.Train.Steps, c.Sync.Audit = 9, auditEvery }
	run, cfg, plan, ids := colludedRunReady(t, 9, 1, collude, set, func(r *LocalRun) func() {
		for _, w := range r.Workers() {
			if err := w.Restore(weights, moments[w.Replica()], 7); err != nil {
				t.Fatal(err)
			}
		}
		return nil
	})
	for h := range 3 {
		rej, _ := run.ReportedBy(h)
		for _, r := range rej {
			if r.Member != ids[3] {
				t.Errorf("honest replica %d dropped an honest member: %+v", h, r)
			}
		}
	}
	ev := run.Workers()[0].Evidence(ids[3])
	if ev == nil {
		t.Fatal("replica 0 kept no evidence against the liar")
	}
	if ev.Step != 9 || ev.From != 7 {
		t.Fatalf("evidence of steps %d–%d, want 8–9", ev.From+1, ev.Step)
	}
	data := run.Workers()[0].data
	if ok, why, err := VerifyEvidence(cfg, plan, data, ev, ids[3]); !ok || err != nil || !strings.Contains(why, "audit") {
		t.Fatalf("the judge did not convict the liar on its audit: %v %q %v", ok, why, err)
	}
	if ok, why, err := VerifyEvidence(cfg, plan, data, ev, ids[1]); ok || err != nil {
		t.Fatalf("the judge convicted an honest member (%q) or failed: %v", why, err)
	}
	forged := *ev
	forged.From = 6
	if _, _, err := VerifyEvidence(cfg, plan, data, &forged, ids[3]); !errors.Is(err, ErrForgedEvidence) {
		t.Fatalf("evidence claiming anchor step 6: %v, want it refused as forged", err)
	}
	// Every member signing the anchor's digest without its step (as before the step was
	// bound): each signature verifies, but not against the digest DiLoCo signs.
	unbound := *ev
	unbound.Signed = make([][]byte, len(ev.Signed))
	for m, p := range ev.Signed {
		payload, d, _, err := splitSigned(p)
		if err != nil {
			t.Fatal(err)
		}
		s := slot{Job: ev.Job, Epoch: ev.Epoch, Step: ev.Step, Index: ev.Index, Round: ev.Base + uint16(m), Codec: ev.Codec, N: ev.N}
		if unbound.Signed[m], err = signContribution(run.Workers()[m].signKey, s, payload, bind(thetaDigest(ev.Theta...), d.model())); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := VerifyEvidence(cfg, plan, data, &unbound, ids[3]); !errors.Is(err, ErrForgedEvidence) || !strings.Contains(err.Error(), "strategy") {
		t.Fatalf("evidence signed without the anchor step: %v, want it refused as forged", err)
	}
	forged.From = 5 // signed by nobody either; the verifier worker refuses the span itself
	if w, _, err := newVerifierWorker(cfg, plan, data, &forged); err == nil || !strings.Contains(err.Error(), "outer steps are every 3") {
		if w != nil {
			w.Close()
		}
		t.Fatalf("a verifier of four inner steps: %v, want it refused", err)
	}
}
