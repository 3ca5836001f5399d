package parallel

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// nodeKeys returns n Ed25519 node keys and their peer IDs.
// They are made by libp2p, as a node's are, and held as the standard library's keys, as
// the data plane hands them to the engine (mesh/dataplane Plane.SigningKey).
func nodeKeys(t testing.TB, n int) ([]ed25519.PrivateKey, []string) {
	t.Helper()
	keys, ids := make([]ed25519.PrivateKey, n), make([]string, n)
	for i := range n {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := k.Raw()
		if err != nil {
			t.Fatal(err)
		}
		keys[i], ids[i] = ed25519.PrivateKey(raw), id.String()
	}
	return keys, ids
}

// signingPeer is an in-memory peer that holds its node key.
type signingPeer struct {
	Transport
	key ed25519.PrivateKey
}

func (p signingPeer) SigningKey() ed25519.PrivateKey { return p.key }

// tamperer is a peer that flips the lowest bit of the first value of every contribution
// it sends, after signing: what a relay or a man in the middle would change (one that
// changed the commitment to match: the signature still tells).
type tamperer struct{ Transport }

func (p tamperer) Send(ctx context.Context, to string, f *frame.Frame) error {
	return alteringSend(ctx, p.Transport, to, f, p.AlterContribution)
}

func (p tamperer) AlterContribution(_ context.Context, _ string, f *frame.Frame) (*frame.Frame, error) {
	if f.Kind == frame.KindReduce && f.DType == frame.DTypeF32 && len(f.Payload) > 0 {
		g := *f
		g.Payload = slices.Clone(f.Payload)
		g.Payload[0] ^= 1
		f = &g
	}
	return f, nil
}

// gatherSigned runs one signed gather of three members, member 2 sending through wrap,
// and returns what members 0 and 1 dropped.
func gatherSigned(t *testing.T, wrap func(Transport) Transport, theta2 [thetaLen]byte) []Rejection {
	t.Helper()
	keys, ids := nodeKeys(t, 3)
	net := NewInMemory(ids...)
	defer net.Close()
	var mu sync.Mutex
	var rejected []Rejection
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for m := range 3 {
		wg.Go(func() {
			var tr Transport = net.Peer(ids[m])
			theta := [thetaLen]byte{1}
			if m == 2 {
				tr, theta = wrap(tr), theta2
			}
			pol := policy{rule: jobspec.AggregateMean, sign: &signer{key: keys[m], theta: func() [thetaLen]byte { return theta }},
				reject: func(r Rejection) {
					if m != 2 {
						mu.Lock()
						rejected = append(rejected, r)
						mu.Unlock()
					}
				}}
			x := []float32{1 + float32(m), 2, 3, 4}
			errs[m] = gatherAggregate(context.Background(), tr, Group{Members: ids, Self: m}, roundKey{job: 7, step: 3}, 0, x, nil, pol)
		})
	}
	wg.Wait()
	for m, err := range errs[:2] {
		if err != nil {
			t.Fatalf("member %d: %v", m, err)
		}
	}
	for i := range rejected {
		if rejected[i].Member != ids[2] {
			t.Errorf("an honest member was dropped: %+v", rejected[i])
		}
		rejected[i].Member = "m2"
	}
	return rejected
}

// TestSignedContributions: in a signed gather a contribution altered after its author
// signed it, or signed against another θ, is dropped by every honest member as
// undecodable; an untouched one is not.
func TestSignedContributions(t *testing.T) {
	same := [thetaLen]byte{1}
	if got := gatherSigned(t, func(tr Transport) Transport { return tr }, same); len(got) != 0 {
		t.Fatalf("honest signed gather dropped %v", got)
	}
	for name, c := range map[string]struct {
		wrap  func(Transport) Transport
		theta [thetaLen]byte
	}{
		"tampered":      {func(tr Transport) Transport { return tamperer{tr} }, same},
		"another theta": {func(tr Transport) Transport { return tr }, [thetaLen]byte{2}},
	} {
		got := slices.DeleteFunc(gatherSigned(t, c.wrap, c.theta), func(r Rejection) bool { return strings.Contains(r.Reason, "result digest") })
		if len(got) != 2 {
			t.Fatalf("%s: dropped %v, want member 2 by both honest members", name, got)
		}
		for _, r := range got {
			if !strings.Contains(r.Reason, "undecodable") || !strings.Contains(r.Reason, "contribution signature") {
				t.Errorf("%s: %+v, want a signature rejection", name, r)
			}
		}
	}
}

// resigner is a colluder that sends every signed contribution scaled by s, signed again
// with its own key: the colluder stands by what it sends, so its signatures verify.
type resigner struct {
	signingPeer
	s float32
}

func (p resigner) Send(ctx context.Context, to string, f *frame.Frame) error {
	return alteringSend(ctx, p.signingPeer, to, f, p.AlterContribution)
}

func (p resigner) AlterContribution(_ context.Context, _ string, f *frame.Frame) (*frame.Frame, error) {
	n := 0
	if len(f.Shape) == 1 {
		n = f.Shape[0]
	}
	if f.Kind != frame.KindReduce || f.DType != frame.DTypeF32 || len(f.Payload) != maxWireBytes(f.Codec, n)+sigTrailer {
		return f, nil
	}
	payload, theta, _, err := splitSigned(f.Payload)
	if err != nil {
		return nil, err
	}
	c, err := codecForWire(f.Codec, 0.25)
	if err != nil {
		return nil, err
	}
	x := make([]float32, n)
	if err := c.Decode(x, payload); err != nil {
		return nil, err
	}
	for i := range x {
		x[i] *= p.s
	}
	g := *f
	if g.Payload, err = signContribution(p.key, frameSlot(f, n), c.Encode(nil, x), theta); err != nil {
		return nil, err
	}
	return &g, nil
}

// colludedRunOf trains four one-stage DiLoCo replicas (signing when sign), the last bad
// of them colluding (their contributions scaled by scale, signed again), with the job's
// sync settings changed by set (ZeRO, streaming), and returns the run, its config, plan
// and members.
func colludedRunOf(t *testing.T, steps, bad int, sign bool, scale float32, set func(*JobConfig)) (*LocalRun, JobConfig, Plan, []string) {
	t.Helper()
	var collude func(signingPeer, []string) Transport
	if sign {
		collude = func(p signingPeer, _ []string) Transport { return resigner{signingPeer: p, s: scale} }
	}
	return colludedRunWith(t, steps, bad, collude, set)
}

// colludedRunWith is colludedRunOf with the colluders' transport collude makes of their
// signing one (nil: nobody signs, and the colluders send what they compute).
func colludedRunWith(t *testing.T, steps, bad int, collude func(p signingPeer, ids []string) Transport, set func(*JobConfig)) (*LocalRun, JobConfig, Plan, []string) {
	t.Helper()
	return colludedRunReady(t, steps, bad, collude, set, func(*LocalRun) func() { return nil })
}

// colludedRunReady is colludedRunWith, calling ready with the run before its first step,
// and what ready returns (when not nil) after every step.
func colludedRunReady(t *testing.T, steps, bad int, collude func(p signingPeer, ids []string) Transport, set func(*JobConfig), ready func(*LocalRun) func()) (*LocalRun, JobConfig, Plan, []string) {
	t.Helper()
	return colludedRunOfN(t, 4, steps, bad, collude, set, ready)
}

// colludedRunOfN is colludedRunReady with n replicas, the last bad of them colluding.
func colludedRunOfN(t *testing.T, n, steps, bad int, collude func(p signingPeer, ids []string) Transport, set func(*JobConfig), ready func(*LocalRun) func()) (*LocalRun, JobConfig, Plan, []string) {
	t.Helper()
	cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	cfg.Train.Steps, cfg.Train.Batch, cfg.Train.MicroBatches = steps, 8, 1
	cfg.Sync.Mode, cfg.Sync.InnerSteps, cfg.Sync.Aggregate = jobspec.SyncDiLoCo, 3, jobspec.AggregateMean
	set(&cfg)
	keys, ids := nodeKeys(t, n)
	var plan Plan
	for _, id := range ids {
		plan.Replicas = append(plan.Replicas, []StagePlan{{Node: id, Last: cfg.Train.Model.NumLayers()}})
	}
	net := NewInMemory(ids...)
	t.Cleanup(func() { net.Close() })
	run, err := NewLocalRun(cfg, plan, colludedData(), func(node string) Transport {
		i := slices.Index(ids, node)
		if collude == nil {
			return net.Peer(node)
		}
		p := signingPeer{Transport: net.Peer(node), key: keys[i]}
		if i >= n-bad {
			return collude(p, ids)
		}
		return p
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	after := ready(run)
	for run.StepsDone() < cfg.Train.Steps {
		if _, err := run.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if after != nil {
			after()
		}
	}
	return run, cfg, plan, ids
}

var signingCost = flag.Bool("signing-cost", false, "print what signing costs an honest four-replica DiLoCo run (TestSigningKeepsHonestBits)")

// TestSigningKeepsHonestBits: an honest four-replica run ends with the same validation
// loss, to the bit, signed or not, and drops nothing, under DiLoCo, ZeRO-1 (scored: every
// step's gather signed against the weights) and streaming (each fragment signed against
// every fragment's anchors at its launch); with -signing-cost it prints the wall time and
// the bytes replica 0 sent, each way.
func TestSigningKeepsHonestBits(t *testing.T) {
	for name, set := range map[string]func(*JobConfig){
		"diloco": func(*JobConfig) {},
		"zero1": func(c *JobConfig) {
			c.Sync.Mode, c.Sync.Zero, c.Sync.Score = jobspec.SyncEveryStep, 1, jobspec.ScoreOn
		},
		"streaming": func(c *JobConfig) {
			c.Sync.Mode, c.Sync.InnerSteps, c.Sync.Fragments, c.Sync.Overlap = jobspec.SyncStreaming, 4, 2, 1
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkSigningKeepsBits(t, "replica 0", func(sign bool) (*LocalRun, JobConfig) {
				run, cfg, _, _ := colludedRunOf(t, 24, 0, sign, 1, set)
				return run, cfg
			})
		})
	}
}

// checkSigningKeepsBits trains the honest run train builds, unsigned then signed: both
// drop nothing and end with the same validation loss to the bit; with -signing-cost it
// logs the wall time and the bytes the run's first worker (who) sent each way.
func checkSigningKeepsBits(t *testing.T, who string, train func(sign bool) (*LocalRun, JobConfig)) {
	t.Helper()
	var vals [2]float64
	for i, sign := range []bool{false, true} {
		start := time.Now()
		run, cfg := train(sign)
		wall := time.Since(start)
		val, err := run.Evaluate(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rej := run.Rejected(); len(rej) != 0 {
			t.Fatalf("signed %v: honest run dropped %v", sign, rej)
		}
		vals[i] = val
		if *signingCost {
			_, sent := run.Workers()[0].BytesSent()
			t.Logf("signed %v: %d steps in %v, %s sent %d bytes for synchronisation, val %.6f", sign, cfg.Train.Steps, wall, who, sent, val)
		}
	}
	if math.Float64bits(vals[0]) != math.Float64bits(vals[1]) {
		t.Fatalf("validation loss %v unsigned, %v signed: signing changed honest bits", vals[0], vals[1])
	}
}

// TestPipelinedSigningKeepsHonestBits: four honest replicas of two stages under
// every-step sync and ZeRO-1 (score on: every gather scored from the stage weight mirror,
// and signed against the run's weights and the whole model's digest) end with the same
// validation loss, to the bit, signed or not, and drop nothing; with -signing-cost it
// prints the wall time and the bytes stage node 0 sent, each way.
func TestPipelinedSigningKeepsHonestBits(t *testing.T) {
	skipUnderRace(t)
	for name, set := range map[string]func(*JobConfig){
		"sync": func(c *JobConfig) { c.Sync.Mode, c.Sync.Score = jobspec.SyncEveryStep, jobspec.ScoreOn },
		"zero1": func(c *JobConfig) {
			c.Sync.Mode, c.Sync.Zero, c.Sync.Score = jobspec.SyncEveryStep, 1, jobspec.ScoreOn
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkSigningKeepsBits(t, "stage node 0", func(sign bool) (*LocalRun, JobConfig) {
				run, cfg, _, _, _ := pipelinedRunOf(t, 24, sign, 1, set)
				return run, cfg
			})
		})
	}
}

// TestEvidenceConvictsColluders: two colluders of four (×−15, standing by their
// signatures) are named by both honest workers, each of which holds evidence that the
// leader's check convicts; evidence accusing an honest member does not convict, and
// evidence whose contribution or θ a reporter altered is refused as forged.
func TestEvidenceConvictsColluders(t *testing.T) {
	for name, c := range map[string]struct {
		scale float32
		set   func(*JobConfig)
	}{
		"diloco": {-15, func(*JobConfig) {}},
		// ZeRO-1 under score on: every step's gradients are gathered whole, signed
		// against the run's weights, and judged as every-step sync's.
		"zero1": {-15, func(c *JobConfig) {
			c.Sync.Mode, c.Sync.Zero, c.Sync.Score = jobspec.SyncEveryStep, 1, jobspec.ScoreOn
		}},
		// Streaming DiLoCo, two fragments overlapped by a step: each fragment's gather is
		// signed against every fragment's anchors at its launch.
		"streaming": {-15, func(c *JobConfig) {
			c.Sync.Mode, c.Sync.InnerSteps, c.Sync.Fragments, c.Sync.Overlap = jobspec.SyncStreaming, 4, 2, 1
		}},
		"zero2": {-15, func(c *JobConfig) {
			c.Sync.Mode, c.Sync.Zero, c.Sync.Score = jobspec.SyncEveryStep, 2, jobspec.ScoreOn
		}},
	} {
		t.Run(name, func(t *testing.T) {
			run, cfg, plan, ids := colludedRunOf(t, 12, 2, true, c.scale, c.set)
			checkEvidenceConvicts(t, run, cfg, plan, ids)
		})
	}
}

// checkEvidenceConvicts is TestEvidenceConvictsColluders' check of a run whose members
// ids[2:] colluded.
func checkEvidenceConvicts(t *testing.T, run *LocalRun, cfg JobConfig, plan Plan, ids []string) {
	t.Helper()
	rej0, named0 := run.ReportedBy(0)
	t.Logf("worker 0 dropped %d, first %v; codec %s", len(rej0), rej0[:min(len(rej0), 2)], cfg.Sync.Codec)
	_, named1 := run.ReportedBy(1)
	named := append(slices.Clone(named0), named1...)
	slices.Sort(named)
	want := []string{ids[2], ids[2], ids[3], ids[3]}
	slices.Sort(want)
	if !slices.Equal(named, want) {
		t.Fatalf("named %v, want both colluders by each honest worker", named)
	}
	for h := range 2 {
		w := run.Workers()[h]
		for _, bad := range ids[2:] {
			ev, wire := keptEvidence(t, w, h, bad)
			start := time.Now()
			ok, why, err := VerifyEvidence(cfg, plan, testData(), wire, bad)
			took := time.Since(start)
			if err != nil || !ok {
				t.Fatalf("worker %d's evidence against %s: convicted %v (%s), %v", h, bad, ok, why, err)
			}
			t.Logf("worker %d's evidence against %s (%d bytes, judged in %v): %s", h, bad[len(bad)-6:], len(ev.Marshal()), took, why)
		}
	}
	ev := keptOfKind(run.Workers()[0], EvidenceGather)
	if ok, why, err := VerifyEvidence(cfg, plan, testData(), ev, ids[1]); err != nil || ok {
		t.Fatalf("evidence against an honest member: convicted %v (%s), %v", ok, why, err)
	}
	forged := *ev
	forged.Signed = slices.Clone(ev.Signed)
	forged.Signed[1] = slices.Clone(ev.Signed[1])
	forged.Signed[1][0] ^= 0x80 // an honest member's contribution, altered to look bad
	if _, _, err := VerifyEvidence(cfg, plan, testData(), &forged, ids[1]); !errors.Is(err, ErrForgedEvidence) {
		t.Fatalf("an altered contribution: %v, want it refused as forged", err)
	}
	t.Logf("θ of %d runs", len(ev.Theta))
	for r := range ev.Theta { // under streaming every fragment's anchors, not only the gathered one's
		forged = *ev
		forged.Theta = slices.Clone(ev.Theta)
		forged.Theta[r] = slices.Clone(ev.Theta[r])
		forged.Theta[r][0] += 1 // a θ the members never signed
		if _, _, err := VerifyEvidence(cfg, plan, testData(), &forged, ids[2]); !errors.Is(err, ErrForgedEvidence) {
			t.Fatalf("another θ of run %d of %d: %v, want it refused as forged", r, len(ev.Theta), err)
		}
	}
}

// TestEvidenceWireLimits: a marshalled evidence decodes to itself, and truncations or
// lengths past the limits are refused before they are allocated.
func TestEvidenceWireLimits(t *testing.T) {
	ev := &Evidence{Job: 1, Epoch: 2, Step: 3, From: 6, Index: 4, Base: 5, Codec: frame.CodecNone, N: 2,
		Members: []string{"a", "b"}, Reporter: 1, Theta: [][]float32{{1, 2}}, Others: [][]float32{{}, {3, 4, 5}}, Signed: [][]byte{nil, make([]byte, 8+sigTrailer)}, Dropped: []string{"a"}}
	b := ev.Marshal()
	got, err := UnmarshalEvidence(b)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(ev) {
		t.Fatalf("round trip %+v, %v", got, err)
	}
	for n := range len(b) {
		if _, err := UnmarshalEvidence(b[:n]); err == nil {
			t.Fatalf("a truncation to %d bytes decoded", n)
		}
	}
	huge := slices.Clone(b)
	copy(huge[len(evidenceMagic)+8+4+4+4+2+2+1:], []byte{0xff, 0xff, 0xff, 0xff}) // N
	if _, err := UnmarshalEvidence(huge); err == nil {
		t.Fatal("an element count past the limit decoded")
	}
	unknown := slices.Clone(b)
	unknown[len(unknown)-1] = byte(EvidenceParams) + 1 // the kind, last
	if _, err := UnmarshalEvidence(unknown); err == nil {
		t.Fatal("an unknown evidence kind decoded")
	}
	// Result digests: none or one per member, each empty or a signed digest's length.
	for _, results := range [][][]byte{{nil}, {nil, make([]byte, resultDigestLen-1)}} {
		bad := *ev
		bad.Results = results
		if _, err := UnmarshalEvidence(bad.Marshal()); err == nil {
			t.Fatalf("result digests of lengths %d decoded", len(results))
		}
	}
	good := *ev
	good.Results, good.Kind = [][]byte{nil, make([]byte, resultDigestLen)}, EvidenceParams
	if got, err := UnmarshalEvidence(good.Marshal()); err != nil || fmt.Sprint(got) != fmt.Sprint(&good) {
		t.Fatalf("round trip with result digests and a kind: %+v, %v", got, err)
	}
}

// FuzzUnmarshalEvidence: the decoder never panics, and what it accepts encodes back to
// the same bytes.
func FuzzUnmarshalEvidence(f *testing.F) {
	f.Add((&Evidence{Job: 1, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{make([]byte, 4+sigTrailer), nil}, Dropped: []string{"b"}}).Marshal())
	f.Add((&Evidence{Job: 1, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{make([]byte, 4+sigTrailer), nil}, Dropped: []string{"b"},
		Results: [][]byte{make([]byte, resultDigestLen), nil}, Kind: EvidenceParams}).Marshal())
	f.Add((&Evidence{Job: 1, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Others: [][]float32{nil, {2, 3}},
		Signed: [][]byte{make([]byte, 4+sigTrailer), nil}, Dropped: []string{"b"}}).Marshal())
	f.Add((&Evidence{Job: 1, Step: 9, From: 7, N: 1, Members: []string{"a", "b"}, Theta: [][]float32{{1}}, Signed: [][]byte{make([]byte, 4+sigTrailer), nil}, Dropped: []string{"b"}}).Marshal())
	f.Add([]byte("MNEV\x03"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := UnmarshalEvidence(data)
		if err != nil {
			return
		}
		if again := ev.Marshal(); string(again) != string(data) {
			t.Fatalf("re-encoded %x, got %x", again, data)
		}
	})
}

// BenchmarkThetaDigest is the SHA-256 of a θ of 1M float32 (4 MB): what a signed
// every-step sync adds per step for each million weights (DiLoCo: per outer step).
func BenchmarkThetaDigest(b *testing.B) {
	v := make([]float32, 1<<20)
	for i := range v {
		v[i] = float32(i)
	}
	b.SetBytes(4 << 20)
	for b.Loop() {
		thetaDigest(v)
	}
}

// BenchmarkSignVerifyContribution is one contribution of 1M float32 signed and verified
// (its SHA-256 twice, an Ed25519 signature and a verification).
func BenchmarkSignVerifyContribution(b *testing.B) {
	keys, ids := nodeKeys(b, 1)
	p := make([]byte, 4<<20)
	s := slot{Job: 1, N: 1 << 20}
	b.SetBytes(int64(len(p)))
	for b.Loop() {
		signed, err := signContribution(keys[0], s, p, digests{})
		if err != nil {
			b.Fatal(err)
		}
		payload, theta, sig, _ := splitSigned(signed)
		if err := verifyContribution(ids[0], s, payload, theta, sig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGather is one checked gather of four in-memory members of the in-bound
// table's model (42,624 weights), unsigned and signed (θ digest included), with and
// without the commitment that precedes the contributions (commitContributions), on frames
// delivered at once or after a one-way latency: what signatures and commit-before-reveal
// add to a sync.
//
//	go test ./parallel -run '^$' -bench 'BenchmarkGather' -benchtime 100x -count 6
func BenchmarkGather(b *testing.B) {
	const n = 42624
	keys, ids := nodeKeys(b, 4)
	theta := make([]float32, n)
	defer func(old int) { minCommitMembers = old }(minCommitMembers)
	for _, latency := range []time.Duration{0, 5 * time.Millisecond} {
		for _, signed := range []bool{false, true} {
			for _, commit := range []bool{false, true} {
				b.Run(fmt.Sprintf("latency=%v/signed=%v/commit=%v", latency, signed, commit), func(b *testing.B) {
					minCommitMembers = 3
					if !commit {
						minCommitMembers = math.MaxInt
					}
					net := NewInMemory(ids...)
					defer net.Close()
					step := uint32(0)
					for b.Loop() {
						step++
						var wg sync.WaitGroup
						for m := range 4 {
							wg.Go(func() {
								pol := policy{rule: jobspec.AggregateMean}
								if signed {
									pol.sign = &signer{key: keys[m], theta: lazyTheta(func() [thetaLen]byte { return thetaDigest(theta) })}
								}
								x := make([]float32, n)
								for i := range x {
									x[i] = float32(i%7) * 1e-3
								}
								var tr Transport = net.Peer(ids[m])
								if latency > 0 {
									tr = delayed{tr, latency}
								}
								if err := gatherAggregate(context.Background(), tr, Group{Members: ids, Self: m}, roundKey{job: 1, step: step}, 0, x, nil, pol); err != nil {
									b.Error(err)
								}
							})
						}
						wg.Wait()
					}
					b.ReportMetric(float64(net.SentBytes(frame.KindReduce))/float64(4*b.N), "B/member")
				})
			}
		}
	}
}

// delayed delivers each frame a one-way latency after it is sent (a link's, for
// benchmarks), without holding the sender.
type delayed struct {
	Transport
	latency time.Duration
}

func (d delayed) Send(ctx context.Context, to string, f *frame.Frame) error {
	time.AfterFunc(d.latency, func() { _ = d.Transport.Send(ctx, to, f) })
	return nil
}

// TestKeptEvidenceIsBounded: a gather whose evidence would pass MaxKeptEvidenceBytes is
// not kept, and the older evidence of its run goes with it.
func TestKeptEvidenceIsBounded(t *testing.T) {
	var st evidenceStore
	small := &Evidence{Index: 3, Step: 1, Theta: [][]float32{make([]float32, 4)}, Signed: [][]byte{make([]byte, 16), nil}, Dropped: []string{"b"}}
	st.keep(small)
	if st.latest[evidenceKey{index: 3}] != small {
		t.Fatal("a small evidence was not kept")
	}
	defer func(old int) { MaxKeptEvidenceBytes = old }(MaxKeptEvidenceBytes)
	MaxKeptEvidenceBytes = 31
	st.keep(&Evidence{Index: 3 + attemptIndexStride, Step: 2, Theta: [][]float32{make([]float32, 4)}, Signed: [][]byte{make([]byte, 16), nil}, Dropped: []string{"b"}})
	if len(st.latest) != 0 {
		t.Fatalf("kept %d evidences past the bound", len(st.latest))
	}
}

// TestAuthorKeyReadsLibp2pPeerIDs: the engine reads an author's Ed25519 key from its
// peer ID without libp2p (which it may not import: internal/archtest) and gets the key
// libp2p puts there; IDs of other key types, other encodings and garbage name no key.
func TestAuthorKeyReadsLibp2pPeerIDs(t *testing.T) {
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	pub, err := authorKey(id.String())
	if err != nil {
		t.Fatal(err)
	}
	want, _ := k.GetPublic().Raw()
	if !bytes.Equal(pub, want) {
		t.Fatalf("key %x from %s, libp2p's is %x", pub, id, want)
	}
	sk, _, err := crypto.GenerateSecp256k1Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := peer.IDFromPrivateKey(sk)
	for _, bad := range []string{other.String(), peer.ToCid(id).String(), "", "not base58 0OIl", strings.Repeat("1", 100), id.String()[:20]} {
		if _, err := authorKey(bad); !errors.Is(err, errSignature) {
			t.Errorf("author %q: %v, want a signature error", bad, err)
		}
	}
}

// TestPipelinedEvidenceConvictsColluders: four replicas of two stages, scored per stage
// on the whole model, whose stage-0 nodes of replicas 2 and 3 collude (×−15, signed
// again): under DiLoCo from the anchors the stages exchange, under every-step sync (score
// on, or auto's contested gathers) and ZeRO-1 from the weights the stage weight mirror
// brings. Each honest stage-0 node keeps evidence that carries the other stage's values
// it scored with, and the leader convicts both colluders from it. A reporter that ships
// other values (to make an honest member's contribution score badly), or none, or
// evidence whose values fewer than a majority of the group signed, convicts nobody: the
// accused's and the group's signatures bind the values they held, not the reporter's.
func TestPipelinedEvidenceConvictsColluders(t *testing.T) {
	for name, set := range map[string]func(*JobConfig){
		"diloco": func(*JobConfig) {},
		"sync": func(c *JobConfig) {
			c.Sync.Mode, c.Sync.Score = jobspec.SyncEveryStep, jobspec.ScoreOn
		},
		// score: auto scores only the contested gathers (two against two) from the same
		// mirror; the signatures bind its model at every gather all the same.
		"sync-auto": func(c *JobConfig) { c.Sync.Mode = jobspec.SyncEveryStep },
		"zero1": func(c *JobConfig) {
			c.Sync.Mode, c.Sync.Zero, c.Sync.Score = jobspec.SyncEveryStep, 1, jobspec.ScoreOn
		},
	} {
		t.Run(name, func(t *testing.T) { checkPipelinedEvidence(t, set) })
	}
}

// pipelinedRunOf trains four replicas of two stages (ids[2r+s] is replica r's stage s)
// for steps steps, signing when sign, the stage-0 nodes of replicas 2 and 3 colluding
// when scale is not 1 (their contributions scaled by it, signed again), under DiLoCo with
// the sync settings set changes; it returns the run, its config, plan, keys and members.
func pipelinedRunOf(t *testing.T, steps int, sign bool, scale float32, set func(*JobConfig)) (*LocalRun, JobConfig, Plan, []ed25519.PrivateKey, []string) {
	t.Helper()
	var collude func(signingPeer, []string) Transport
	if sign {
		collude = func(p signingPeer, _ []string) Transport {
			if scale == 1 {
				return p
			}
			return resigner{signingPeer: p, s: scale}
		}
	}
	return pipelinedRunWith(t, steps, collude, set)
}

// pipelinedRunWith is pipelinedRunOf with the colluders' transport collude makes of their
// signing one (nil: nobody signs, and nobody colludes).
func pipelinedRunWith(t *testing.T, steps int, collude func(p signingPeer, ids []string) Transport, set func(*JobConfig)) (*LocalRun, JobConfig, Plan, []ed25519.PrivateKey, []string) {
	t.Helper()
	cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	cfg.Train.Steps, cfg.Train.Batch, cfg.Train.MicroBatches = steps, 8, 1
	cfg.Sync.Mode, cfg.Sync.InnerSteps, cfg.Sync.Aggregate = jobspec.SyncDiLoCo, 3, jobspec.AggregateMean
	set(&cfg)
	L := cfg.Train.Model.NumLayers()
	keys, ids := nodeKeys(t, 8)
	var plan Plan
	for r := range 4 {
		plan.Replicas = append(plan.Replicas, []StagePlan{{Node: ids[2*r], First: 0, Last: L / 2}, {Node: ids[2*r+1], First: L / 2, Last: L}})
	}
	net := NewInMemory(ids...)
	t.Cleanup(func() { net.Close() })
	run, err := NewLocalRun(cfg, plan, colludedData(), func(node string) Transport {
		i := slices.Index(ids, node)
		if collude == nil {
			return net.Peer(node)
		}
		p := signingPeer{Transport: net.Peer(node), key: keys[i]}
		if i == 4 || i == 6 {
			return collude(p, ids)
		}
		return p
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	for run.StepsDone() < cfg.Train.Steps {
		if _, err := run.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return run, cfg, plan, keys, ids
}

// checkPipelinedEvidence is TestPipelinedEvidenceConvictsColluders for one sync mode
// (set).
func checkPipelinedEvidence(t *testing.T, set func(*JobConfig)) {
	run, cfg, plan, keys, ids := pipelinedRunOf(t, 12, true, -15, set)
	bad := []string{ids[4], ids[6]}
	for _, h := range []int{0, 2} { // the honest stage-0 nodes
		w := run.Workers()[h]
		for _, accused := range bad {
			// The gather's evidence: under ZeRO the colluders' signed parameter chunks are
			// scaled too, and their evidence (no other stage's weights) may be the newer.
			ev := keptOfKind(w, EvidenceGather, accused)
			if ev == nil {
				t.Fatalf("honest stage node %d kept no evidence against %s", h, accused)
			}
			if len(ev.Others) != 2 || len(ev.Others[0]) != 0 || len(ev.Others[1]) == 0 {
				t.Fatalf("evidence of step %d carries values of %d stages, want stage 1's", ev.Step, len(ev.Others))
			}
			wire, err := UnmarshalEvidence(ev.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			ok, why, err := VerifyEvidence(cfg, plan, testData(), wire, accused)
			took := time.Since(start)
			if err != nil || !ok {
				t.Fatalf("node %d's evidence of step %d against %s: convicted %v (%s), %v", h, ev.Step, accused, ok, why, err)
			}
			t.Logf("node %d's evidence of step %d against %s (%d bytes, judged in %v): %s", h, ev.Step, accused[len(accused)-6:], len(ev.Marshal()), took, why)
		}
	}
	ev := keptOfKind(run.Workers()[0], EvidenceGather, bad[0])
	if ok, why, err := VerifyEvidence(cfg, plan, testData(), ev, ids[2]); err != nil || ok {
		t.Fatalf("evidence against an honest member: convicted %v (%s), %v", ok, why, err)
	}
	for name, accused := range map[string]string{"an honest member": ids[2], "a colluder": bad[0]} {
		forged := *ev
		forged.Others = [][]float32{nil, slices.Clone(ev.Others[1])}
		for i := range forged.Others[1] {
			forged.Others[1][i] *= -3 // the reporter's choice of the other stage's values
		}
		if ok, _, err := VerifyEvidence(cfg, plan, testData(), &forged, accused); ok || !errors.Is(err, ErrUnboundAnchors) {
			t.Fatalf("other values against %s: convicted %v, %v; want ErrUnboundAnchors", name, ok, err)
		}
	}
	unbound := *ev // values dropped: re-scored from nothing, the evidence cannot convict
	unbound.Others = nil
	if ok, _, err := VerifyEvidence(cfg, plan, testData(), &unbound, bad[0]); ok || !errors.Is(err, ErrUnboundAnchors) {
		t.Fatalf("evidence stripped of the values it was scored with: convicted %v, %v; want ErrUnboundAnchors", ok, err)
	}
	// Unscored by the reporter's word: a reporter that signs its own contribution again
	// without a model digest and ships no values would have the leader re-judge without
	// the score the accused (honest, mirrored) signed for, by the checks alone.
	unscored := *ev
	unscored.Others, unscored.Signed = nil, slices.Clone(ev.Signed)
	unscored.Signed[ev.Reporter] = resignModel(t, keys[slices.Index(ids, ev.Members[ev.Reporter])], ev, ev.Reporter, [thetaLen]byte{})
	if ok, _, err := VerifyEvidence(cfg, plan, testData(), &unscored, ids[2]); ok || !errors.Is(err, ErrUnboundAnchors) {
		t.Fatalf("evidence the reporter made unscored, against an honest member: convicted %v, %v; want ErrUnboundAnchors", ok, err)
	}
	// Bound by half the group only: the members other than the reporter and the accused
	// signed another model (as members that held other bits would).
	half := *ev
	half.Signed = slices.Clone(ev.Signed)
	accused := slices.Index(ev.Members, bad[0])
	for m := range ev.Members {
		if m != ev.Reporter && m != accused {
			half.Signed[m] = resignModel(t, keys[slices.Index(ids, ev.Members[m])], ev, m, [thetaLen]byte{1})
		}
	}
	if ok, _, err := VerifyEvidence(cfg, plan, testData(), &half, bad[0]); ok || !errors.Is(err, ErrUnboundAnchors) {
		t.Fatalf("values bound by 2 of 4 members: convicted %v, %v; want ErrUnboundAnchors", ok, err)
	}
}

// resignModel is member m's contribution in ev signed again by key (its author's) with
// its θ digest and the model digest model.
func resignModel(t *testing.T, key ed25519.PrivateKey, ev *Evidence, m int, model [thetaLen]byte) []byte {
	t.Helper()
	payload, d, _, err := splitSigned(ev.Signed[m])
	if err != nil {
		t.Fatal(err)
	}
	s := slot{Job: ev.Job, Epoch: ev.Epoch, Step: ev.Step, Index: ev.Index, Round: ev.Base + uint16(m), Codec: ev.Codec, N: ev.N}
	out, err := signContribution(key, s, payload, bind(d.theta(), model))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// keptEvidence is honest worker h's (w's) evidence against bad and its decoded wire form;
// it fails the test when w kept none or it does not round-trip.
func keptEvidence(t *testing.T, w *Worker, h int, bad string) (*Evidence, *Evidence) {
	t.Helper()
	ev := w.Evidence(bad)
	if ev == nil {
		t.Fatalf("honest worker %d kept no evidence against %s", h, bad)
	}
	wire, err := UnmarshalEvidence(ev.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	return ev, wire
}

// keptOfKind is the newest evidence of kind w keeps against any of accused (every
// evidence when none is given), nil when none.
func keptOfKind(w *Worker, kind EvidenceKind, accused ...string) *Evidence {
	w.evidence.mu.Lock()
	defer w.evidence.mu.Unlock()
	var best *Evidence
	for k, ev := range w.evidence.latest {
		against := len(accused) == 0 || slices.ContainsFunc(accused, func(a string) bool { return slices.Contains(ev.Dropped, a) })
		if k.kind == kind && against && (best == nil || ev.Step > best.Step) {
			best = ev
		}
	}
	return best
}

// alteringSend sends f through tr as alter changes it: the Send of a test's attacking
// transport (contributionAlterer). A gather's contribution that its worker already had
// altered before committing to it (commitContributions) goes out as it is.
func alteringSend(ctx context.Context, tr Transport, to string, f *frame.Frame, alter func(context.Context, string, *frame.Frame) (*frame.Frame, error)) error {
	if ctx.Value(committedKey{}) == nil {
		g, err := alter(ctx, to, f)
		if err != nil {
			return err
		}
		f = g
	}
	return tr.Send(ctx, to, f)
}

// frameSlot is the slot a contribution of n elements sent in f is signed for.
func frameSlot(f *frame.Frame, n int) slot {
	return slot{Job: f.Job, Epoch: f.Epoch, Step: f.Step, Index: f.Index, Round: f.Micro, Codec: f.Codec, N: uint32(n)}
}
