package parallel

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// echoer is a colluder that, for each signed contribution it sends, first takes the
// contribution of the honest member source of the same gather (it has not read it yet:
// the frame waits in its mailbox), and sends that back with a little noise, signed as its
// own; the worker reads the taken frame later, as if it had just arrived. An honest member
// that revealed its contribution before it knew the others' let it; now the colluder's
// worker has committed to its own contribution before any is revealed.
type echoer struct {
	signingPeer
	self, source int // their positions in the group
	sourceID     string
	mu           sync.Mutex
	taken        map[frame.Key]*frame.Frame
	echoes       map[frame.Key][]byte
	count        *int // echoes made, shared by the colluders (under mu of each: counted once per gather)
}

func (p *echoer) Send(ctx context.Context, to string, f *frame.Frame) error {
	n := 0
	if len(f.Shape) == 1 {
		n = f.Shape[0]
	}
	if f.Kind != frame.KindReduce || f.DType != frame.DTypeF32 || f.Codec != frame.CodecNone || len(f.Payload) != 4*n+sigTrailer {
		return p.signingPeer.Send(ctx, to, f)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	mine := f.Key()
	payload, ok := p.echoes[mine]
	if !ok {
		k := mine
		k.Micro = f.Micro - uint16(p.self) + uint16(p.source)
		// The source reveals once it holds every commitment, this worker's included: the
		// wait is short, and the minute only bounds a broken run (under load, 2 s could
		// pass first and the colluder would send no echo at all).
		wait, cancel := context.WithTimeout(ctx, time.Minute)
		g, err := p.signingPeer.Recv(wait, p.sourceID, k)
		cancel()
		if err != nil { // nothing to echo: send what the worker computed
			return p.signingPeer.Send(ctx, to, f)
		}
		p.taken[k] = g
		body, d, _, err := splitSigned(g.Payload)
		if err != nil {
			return err
		}
		x := make([]float32, n)
		if err := decodeF32(x, body); err != nil {
			return err
		}
		if payload, err = signedEcho(p.key, f, x, p.self, d, p.count, noneCodec{}); err != nil {
			return err
		}
		p.echoes[mine] = payload
	}
	g := *f
	g.Payload = payload
	return p.signingPeer.Send(ctx, to, &g)
}

// echoMu guards the colluders' shared echo count.
var echoMu sync.Mutex

func (p *echoer) Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error) {
	if g := takeEarly(&p.mu, p.taken, from == p.sourceID, k); g != nil {
		return g, nil
	}
	return p.signingPeer.Recv(ctx, from, k)
}

// takeEarly removes and returns the frame of key k a colluder read from its source before
// its worker asked for it (taken, guarded by mu), where the worker asks the source.
func takeEarly(mu *sync.Mutex, taken map[frame.Key]*frame.Frame, fromSource bool, k frame.Key) *frame.Frame {
	mu.Lock()
	defer mu.Unlock()
	g, ok := taken[k]
	if !ok || !fromSource {
		return nil
	}
	delete(taken, k)
	return g
}

// TestEchoAttackIsRefused: two colluders of four send back the first honest member's
// contribution of every gather with a little noise each, signed as their own (docs/security.md,
// "Echoing an honest member"). Were it admitted, the coordinate-wise median would be that
// member's contribution and the reference distance their noise: every judge would drop
// the second honest member's contribution and three of four would name it (measured
// before commit-before-reveal: "distance 0.471 to the group's median is over 4× the
// reference 0.00101"). A member now reveals only once every other has committed to its
// own, so the echo breaks the colluder's commitment: both honest members drop and name
// both colluders, and neither drops the other honest member.
func TestEchoAttackIsRefused(t *testing.T) {
	echoed := 0
	collude := func(p signingPeer, ids []string) Transport {
		return &echoer{signingPeer: p, self: slices.Index(ids, p.Self()), source: 0, sourceID: ids[0],
			taken: map[frame.Key]*frame.Frame{}, echoes: map[frame.Key][]byte{}, count: &echoed}
	}
	run, _, _, ids := colludedRunWith(t, 12, 2, collude, func(*JobConfig) {})
	for _, d := range honestDrops(t, run, ids, echoed) {
		t.Error(d)
	}
	for r := range 2 {
		rej, named := run.ReportedBy(r)
		for _, bad := range ids[2:] {
			if !slices.Contains(named, bad) {
				t.Errorf("honest replica %d did not name the echoing colluder %s (named %v)", r, bad, named)
			}
			broke := slices.ContainsFunc(rej, func(x Rejection) bool {
				return x.Member == bad && strings.Contains(x.Reason, "differs from its author's commitment")
			})
			if !broke {
				t.Errorf("honest replica %d did not drop %s's echo for breaking its commitment: %+v", r, bad, rej)
			}
		}
	}
	if testing.Verbose() {
		rej, _ := run.ReportedBy(0)
		t.Logf("%d echoes sent; replica 0 dropped %d contributions, the first: %+v", echoed, len(rej), rej[0])
	}
}

// staleEchoer is a colluder that keeps within commit-before-reveal: it commits to the
// source's contribution of the previous gather (which it has seen), with a little noise,
// signed as its own for this gather. It signs as its result digest the source's (its own
// worker aggregated what it computed, not what it sent, and would differ), as colluders
// that aggregate what the honest members do can.
type staleEchoer struct {
	signingPeer
	self     int
	sourceID string
	mu       sync.Mutex
	last     []float32 // the source's last contribution this member read
	count    *int
	// theta is the digest of the honest members' θ: colluders that aggregate what the
	// honest members do know it (here it is read from an honest worker).
	theta   func() digests
	taken   map[frame.Key]*frame.Frame // the source's result digests, read early
	results map[frame.Key][]byte       // this member's result digests, signed
}

// resultDigest is the source's signed result digest of f's gather, signed by this member
// instead (f is this member's own result digest frame), or nil when the source sent none.
func (p *staleEchoer) resultDigest(ctx context.Context, f *frame.Frame) ([]byte, error) {
	p.mu.Lock()
	d, ok := p.results[f.Key()]
	self := p.self
	p.mu.Unlock()
	if ok {
		return d, nil
	}
	// The worker sends its digest to each peer in turn, from one goroutine: the first send
	// waits for the source's (without the lock, which the worker's receives take).
	k := f.Key()
	k.Micro = f.Micro - uint16(self) // the source is the group's first member, self this one's place
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	g, err := p.signingPeer.Recv(wait, p.sourceID, k)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.results[f.Key()] = nil // its own digest then, to every peer, without waiting again
		return nil, nil
	}
	p.taken[k] = g
	sum, theta, _, err := splitSigned(g.Payload)
	if err != nil || len(sum) != sha256.Size {
		p.results[f.Key()] = nil
		return nil, nil
	}
	if d, err = signContribution(p.key, frameSlot(f, len(sum)), sum, theta); err != nil {
		return nil, err
	}
	p.results[f.Key()] = d
	return d, nil
}

// moved is the member's place in the next plan's group (replanning.without).
func (p *staleEchoer) moved(self int) {
	p.mu.Lock()
	p.self = self
	p.mu.Unlock()
}

func (p *staleEchoer) Recv(ctx context.Context, from string, k frame.Key) (*frame.Frame, error) {
	if g := takeEarly(&p.mu, p.taken, from == p.sourceID, k); g != nil {
		return g, nil
	}
	f, err := p.signingPeer.Recv(ctx, from, k)
	if err != nil || from != p.sourceID || f.Kind != frame.KindReduce || f.DType != frame.DTypeF32 || len(f.Shape) != 1 || f.Codec == frame.CodecTopK {
		return f, err
	}
	body, _, _, err := splitSigned(f.Payload)
	if err != nil {
		return f, nil // not a contribution (a result digest, a quorum's frame)
	}
	codec, err := codecForWire(f.Codec, 0)
	if err != nil {
		return nil, err
	}
	x := make([]float32, f.Shape[0])
	if codec.Decode(x, body) != nil {
		return f, nil
	}
	p.mu.Lock()
	p.last = x
	p.mu.Unlock()
	return f, nil
}

func (p *staleEchoer) Send(ctx context.Context, to string, f *frame.Frame) error {
	if f.Kind == frame.KindReduce && f.DType == frame.DTypeU8 && len(f.Payload) == resultDigestLen {
		d, err := p.resultDigest(ctx, f)
		if err != nil {
			return err
		}
		if d != nil {
			g := *f
			g.Payload = d
			f = &g
		}
		return p.signingPeer.Send(ctx, to, f)
	}
	return alteringSend(ctx, p.signingPeer, to, f, p.AlterContribution)
}

func (p *staleEchoer) AlterContribution(_ context.Context, _ string, f *frame.Frame) (*frame.Frame, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	if len(f.Shape) == 1 {
		n = f.Shape[0]
	}
	codec, err := codecForWire(f.Codec, 0)
	if f.Kind != frame.KindReduce || f.DType != frame.DTypeF32 || f.Codec == frame.CodecTopK || err != nil || len(p.last) != n || n == 0 {
		return f, nil
	}
	g := *f
	if g.Payload, err = signedEcho(p.key, f, slices.Clone(p.last), p.self, p.theta(), p.count, codec); err != nil {
		return nil, err
	}
	return &g, nil
}

// signedEcho is x times 1 ± 1e-3·self by coordinate (a colluder's own noise), encoded by
// codec and signed with key as a contribution of f's slot against d; it counts the echo.
func signedEcho(key ed25519.PrivateKey, f *frame.Frame, x []float32, self int, d digests, count *int, codec Codec) ([]byte, error) {
	for i := range x {
		x[i] *= 1 + 1e-3*float32(self)*float32(1-2*(i%2))
	}
	payload, err := signContribution(key, frameSlot(f, len(x)), codec.Encode(nil, x), d)
	if err != nil {
		return nil, err
	}
	echoMu.Lock()
	*count++
	echoMu.Unlock()
	return payload, nil
}

var (
	staleEcho      = flag.Bool("stale-echo", false, "run the stale echo attack (TestStaleEcho) and report what it costs the honest replicas")
	staleEchoSteps = flag.Int("stale-echo-steps", 24, "TestStaleEcho's steps")
	staleEchoRule  = flag.String("stale-echo-rule", "mean", "TestStaleEcho's aggregation rule")
	staleEchoMode  = flag.String("stale-echo-mode", "diloco", "TestStaleEcho's sync mode: diloco or sync (every step)")
	staleEchoAudit = flag.Float64("stale-echo-audit", 0, "TestStaleEcho's audit rate (members recomputed per gather; 0: none)")
	staleEchoOf    = flag.Int("stale-echo-of", 4, "TestStaleEcho's replicas: 4 (two replay) or 3 (one replays)")
	staleEchoCodec = flag.String("stale-echo-codec", "none", "TestStaleEcho's codec: none, fp16 or int8")
	staleEchoInner = flag.Int("stale-echo-inner", 3, "TestStaleEcho's DiLoCo inner steps H (the job default is 50)")
	staleEchoCkpt  = flag.Int("stale-echo-every", 0, "TestStaleEcho's checkpoint.every, where the leader's new plan resumes from (0: every outer step)")
	staleEchoData  = flag.String("stale-echo-data", "", "TestStaleEcho's corpus (model.LoadDataset: builtin:gostd, a file); empty: the tests' one repeated line")
	staleEchoEval  = flag.Int("stale-echo-eval", 0, "TestStaleEcho's validation windows (0: the tests' 6)")
	staleEchoSeed  = flag.Uint64("stale-echo-seed", 0, "TestStaleEcho's train.seed (0: the tests')")
)

// staleEchoTrain sets cfg's validation windows and seed from TestStaleEcho's flags.
func staleEchoTrain(cfg *JobConfig) {
	if *staleEchoEval > 0 {
		cfg.Train.EvalWindows = *staleEchoEval
	}
	if *staleEchoSeed > 0 {
		cfg.Train.Seed = *staleEchoSeed
	}
}

// colludedData is the corpus colludedRunOfN trains on: the tests' (testData) unless
// TestStaleEcho set another (-stale-echo-data).
var colludedData = testData

// staleEchoEvery is the stale echo runs' checkpoint interval: -stale-echo-every, or every
// outer step under mode (the newest state a new plan can resume from, so all a replay did
// before its conviction stays in the run).
func staleEchoEvery(mode jobspec.Sync) int {
	switch {
	case *staleEchoCkpt > 0:
		return *staleEchoCkpt
	case mode == jobspec.SyncEveryStep:
		return 1
	}
	return *staleEchoInner
}

// TestStaleEcho reproduces the replay attack (docs/security.md, "Replaying what was
// seen"): two colluders of four commit to what they have seen, the first honest member's
// contribution of the previous gather, with a little noise, signed as their own against
// the honest θ. It passes every check of what a contribution looks like (norm, distance,
// held-out score: it still lowers the loss, by less than half what a fresh one does) and
// no honest member is dropped, but without audits half of every aggregate is then a step
// the model already took. With -stale-echo it reports the honest replica's validation
// loss against an all-honest run's (both at -stale-echo-audit), and how often an honest
// member dropped the other; it fails only when the harness echoed nothing.
// TestAuditStopsStaleEcho is its acceptance test, with audits.
func TestStaleEcho(t *testing.T) {
	if !*staleEcho {
		t.Skip("a measurement: -stale-echo [-stale-echo-steps N] [-stale-echo-rule R] [-stale-echo-mode M] [-stale-echo-audit A] [-stale-echo-of N] [-stale-echo-codec C] [-stale-echo-inner H] [-stale-echo-data D] [-stale-echo-eval W] [-stale-echo-seed S] [-stale-echo-every K]")
	}
	if *staleEchoData != "" {
		ds, err := model.LoadDataset(*staleEchoData, 256)
		if err != nil {
			t.Fatal(err)
		}
		colludedData = func() *model.Dataset { return ds }
		t.Cleanup(func() { colludedData = testData })
	}
	r := staleEchoRun(t, *staleEchoOf, *staleEchoSteps, jobspec.Sync(*staleEchoMode), jobspec.Aggregate(*staleEchoRule), jobspec.Codec(*staleEchoCodec), *staleEchoAudit)
	for _, d := range r.drops {
		t.Log(d)
	}
	rej, _ := r.run.ReportedBy(0)
	for _, x := range rej {
		if slices.Contains(r.ids[2:], x.Member) {
			t.Logf("honest replica 0 dropped %s: %s", x.Member, x.Reason)
		}
	}
	t.Logf("%s, %s, audit %g, %d steps, %d stale echoes: validation loss %.4f, all honest %.4f (%+.1f%%); the honest replicas dropped each other %d times; convicted %v at steps %v",
		*staleEchoMode, *staleEchoRule, *staleEchoAudit, *staleEchoSteps, r.echoed, r.got, r.want, 100*(r.got-r.want)/r.want, len(r.drops), r.convicted, r.convictedAt)
	if len(r.convictedAt) > 0 {
		// What the honest replicas reach without the colluders' work from the last
		// conviction on: the run all honest, replanned without the colluders at that step.
		at := slices.Max(r.convictedAt)
		set := func(cfg *JobConfig) {
			cfg.Sync.Aggregate, cfg.Sync.Mode, cfg.Sync.Codec, cfg.Sync.Audit = jobspec.Aggregate(*staleEchoRule), jobspec.Sync(*staleEchoMode), jobspec.Codec(*staleEchoCodec), *staleEchoAudit
			cfg.Sync.InnerSteps = *staleEchoInner
			staleEchoTrain(cfg)
		}
		alone, _, _, _ := colludedRunOfN(t, *staleEchoOf, *staleEchoSteps, *staleEchoOf-2, func(p signingPeer, _ []string) Transport { return p }, set, func(run *LocalRun) func() {
			leader := newReplanning(run, staleEchoEvery(jobspec.Sync(*staleEchoMode)), 2)
			replanned := false
			return func() {
				leader.checkpoint(t, run)
				if run.StepsDone() == at && !replanned {
					replanned = true
					var colluders []string
					for _, w := range run.workers[2:] {
						colluders = append(colluders, w.Self())
					}
					leader.without(t, run, colluders...)
				}
			}
		})
		v, err := alone.Evaluate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("the honest replicas alone from step %d: validation loss %.4f (the attacked run %+.1f%% from it)", at, v, 100*(r.got-v)/v)
	}
}

// heldEvidence is the evidence an honest worker shipped, with the epoch's job config and
// plan it is judged under.
type heldEvidence struct {
	cfg  JobConfig
	plan Plan
	ev   *Evidence
}

// staleEchoResult is what a stale echo run measured.
type staleEchoResult struct {
	want, got   float64        // the honest replica's validation loss: all honest, attacked
	echoed      int            // stale echoes the colluders sent
	drops       []string       // drops of one honest member by the other
	convicted   []string       // colluders a leader convicted on an honest member's evidence, in order
	convictedAt []int          // the step each was convicted and left out at
	evidence    []heldEvidence // what convicted each, in order
	run         *LocalRun
	ids         []string
}

// staleEchoRun runs n replicas (3 or 4) for steps, all honest and then with the last n−2
// replaying (staleEchoer), in mode under rule with codec, audited at rate audit. After
// every step it does what a leader does with the evidence an honest member ships against
// each member it named: VerifyEvidence, and the leader's next plan without those convicted
// (replanning: the job's batch over the replicas left, from the newest checkpoint, taken at
// every outer step unless -stale-echo-every says otherwise).
func staleEchoRun(t *testing.T, n, steps int, mode jobspec.Sync, rule jobspec.Aggregate, codec jobspec.Codec, audit float64) staleEchoResult {
	t.Helper()
	val := func(run *LocalRun) float64 {
		v, err := run.Evaluate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	set := func(cfg *JobConfig) {
		cfg.Sync.Aggregate, cfg.Sync.Mode, cfg.Sync.Codec, cfg.Sync.Audit = rule, mode, codec, audit
		cfg.Sync.InnerSteps = *staleEchoInner
		staleEchoTrain(cfg)
	}
	honestOnly := func(*LocalRun) func() { return nil }
	clean, _, _, _ := colludedRunOfN(t, n, steps, n-2, func(p signingPeer, _ []string) Transport { return p }, set, honestOnly)
	var res staleEchoResult
	var honest *Worker
	theta := func() digests {
		if d, ok := honest.sync.(*dilocoSync); ok { // the anchor
			return bind(anchorDigest(d.anchorStep, d.outer[0].anchor), [thetaLen]byte{})
		}
		return bind(paramsDigest(honest.runParams[0]), [thetaLen]byte{}) // the weights before the step's update
	}
	collude := func(p signingPeer, ids []string) Transport {
		return &staleEchoer{signingPeer: p, self: slices.Index(ids, p.Self()), sourceID: ids[0], count: &res.echoed, theta: theta,
			taken: map[frame.Key]*frame.Frame{}, results: map[frame.Key][]byte{}}
	}
	res.run, _, _, res.ids = colludedRunOfN(t, n, steps, n-2, collude, set, func(r *LocalRun) func() {
		honest = r.workers[0]
		for _, w := range r.workers[2:] {
			// The colluders run their own code: their workers audit nobody. An auditing
			// colluder's worker would draw from its own unaltered contribution, not the
			// replay the others received, and could ban its partner, which then stalls.
			w.cfg.Sync.Audit = 0
		}
		leader := newReplanning(r, staleEchoEvery(mode), 2)
		return func() {
			leader.checkpoint(t, r)
			if out := res.convictNamed(t, r); len(out) > 0 {
				leader.without(t, r, out...)
				honest = r.workers[0]
			}
		}
	})
	res.drops = honestDrops(t, res.run, res.ids, res.echoed)
	res.want, res.got = val(clean), val(res.run)
	return res
}

// convictNamed is a leader's handling of the members run's honest replicas (0, 1) named:
// each is convicted when the evidence of the replica that named it holds. It returns those
// it convicted, for the leader's next plan (replanning.without).
func (res *staleEchoResult) convictNamed(t *testing.T, run *LocalRun) (out []string) {
	t.Helper()
	for r := range 2 {
		_, named := run.ReportedBy(r)
		for _, m := range named {
			if slices.Contains(res.convicted, m) {
				continue
			}
			ev := run.workers[r].Evidence(m)
			if ev == nil {
				// Named for result digests signed against another θ (the harness's colluders
				// re-sign their contributions, not their results): not kept, it convicts nobody.
				continue
			}
			ok, why, err := VerifyEvidence(run.cfg, run.workers[r].plan, run.workers[r].data, ev, m)
			if err != nil {
				t.Fatalf("the leader could not check honest replica %d's evidence against %s: %v", r, m, err)
			}
			if ok {
				res.convicted, res.convictedAt = append(res.convicted, m), append(res.convictedAt, run.StepsDone())
				res.evidence = append(res.evidence, heldEvidence{run.cfg, run.workers[r].plan, ev})
				out = append(out, m)
				t.Logf("step %d: %s convicted: %s", run.StepsDone(), m, why)
			} else {
				t.Logf("step %d: %s, named by honest replica %d, not convicted: %s", run.StepsDone(), m, r, why)
			}
		}
	}
	return out
}

// honestDrops fails the test when the colluders (ids[2:]) echoed nothing, and returns
// each drop of one honest replica's (0, 1) contribution by the other.
func honestDrops(t *testing.T, run *LocalRun, ids []string, echoed int) []string {
	t.Helper()
	if echoed == 0 {
		t.Fatal("the colluders echoed nothing")
	}
	var out []string
	for r := range 2 {
		rej, _ := run.ReportedBy(r)
		for _, x := range rej {
			if x.Member == ids[1-r] {
				out = append(out, fmt.Sprintf("honest replica %d dropped the other honest member: %s", r, x.Reason))
			}
		}
	}
	return out
}
