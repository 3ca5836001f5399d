package parallel

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// stageExchangeRun trains a job of three replicas of two stages for its steps, r0.1
// sending the frames of exchange index one value short when short is set, and returns
// the misbehaviour the peers reported and the first step error.
func stageExchangeRun(t *testing.T, cfg JobConfig, index uint16, short bool) ([]Misbehaviour, error) {
	t.Helper()
	plan, names := twoStagePlan(cfg.Train.Model.NumLayers(), 3)
	net := NewInMemory(names...)
	defer net.Close()
	run, err := NewLocalRun(cfg, plan, testData(), func(node string) Transport {
		if short && node == "r0.1" {
			return truncating{net.Peer(node), index}
		}
		return net.Peer(node)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = stepUntilError(run)
	return net.Misbehaviours(), err
}

// Issue 25: a stage node that sent its replica's other stage anchors or mirrored weights
// of the wrong length failed that stage's step, and kept its connection to do it again at
// every retry. The receiver now also reports it to its transport (the data plane then
// disconnects it), naming the sender; the well-formed run reports nobody. Streaming's
// launch exchange (launchIndex) is checked and reported alike.
func TestMalformedStageFrameReportsTheSender(t *testing.T) {
	anchors := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	anchors.Sync.Mode, anchors.Sync.InnerSteps = jobspec.SyncDiLoCo, 2
	anchors.Train.Batch, anchors.Train.MicroBatches, anchors.Train.Steps = 6, 1, 4
	mirror := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
	mirror.Sync.Mode, mirror.Sync.Score = jobspec.SyncEveryStep, jobspec.ScoreOn
	mirror.Train.Batch, mirror.Train.MicroBatches, mirror.Train.Steps = 6, 1, 2
	launch := anchors // streaming's launch at step 2 exchanges before the final outer step
	launch.Sync.Mode = jobspec.SyncStreaming
	for _, c := range []struct {
		name  string
		cfg   JobConfig
		index uint16
	}{{"anchors", anchors, anchorIndex}, {"weights", mirror, mirrorIndex}, {"anchors", launch, launchIndex}} {
		if reports, err := stageExchangeRun(t, c.cfg, c.index, false); err != nil || len(reports) != 0 {
			t.Fatalf("%s (%s), well-formed: error %v, reports %+v", c.name, c.cfg.Sync.Mode, err, reports)
		}
		reports, err := stageExchangeRun(t, c.cfg, c.index, true)
		if err == nil || !strings.Contains(err.Error(), c.name+" from stage 1 (r0.1)") {
			t.Fatalf("%s (%s): training went on past a short frame: %v", c.name, c.cfg.Sync.Mode, err)
		}
		if len(reports) == 0 {
			t.Fatalf("%s (%s): the short frame's sender was not reported", c.name, c.cfg.Sync.Mode)
		}
		for _, m := range reports {
			if m.By != "r0" || m.Peer != "r0.1" || !strings.Contains(m.Reason, c.name) {
				t.Errorf("%s (%s): report %+v, want r0 (stage 0) reporting r0.1", c.name, c.cfg.Sync.Mode, m)
			}
		}
	}
}

// The frames that make the worker report their sender are those no honest stage node
// sends (wrong dtype, codec or length: errMalformed); a frame of another step is refused
// but not a violation (stale at worst).
func TestOnlyMalformedStageFramesAreViolations(t *testing.T) {
	s := pipelinedScorer(t)
	n := s.stageSize(1)
	coded := anchorFrame(n)
	coded.Codec = frame.CodecInt8
	for name, f := range map[string]*frame.Frame{"short": anchorFrame(n - 1), "long": anchorFrame(n + 1), "codec": coded} {
		if err := s.loadStage(1, 0, f); !violation(err) {
			t.Errorf("%s frame: %v, not a violation", name, err)
		}
	}
	stale := anchorFrame(n)
	stale.Step = 3
	if err := s.loadStage(1, 4, stale); err == nil || violation(err) {
		t.Errorf("a frame of another step: %v, want refused and no violation", err)
	}
	if err := s.loadStage(0, 0, anchorFrame(n)); err == nil || violation(err) {
		t.Errorf("a stage the scorer lacks: %v, want refused and no violation (the receiver's own state)", err)
	}
	if violation(context.DeadlineExceeded) || violation(errors.New("closed")) {
		t.Error("a transport error is a violation")
	}
}

// shortSigner is a member that sends its signed contributions one float32 short, signed
// again with its own key: it stands by bytes that no codec decodes to the round's length.
type shortSigner struct {
	Transport
	key ed25519.PrivateKey
}

func (p shortSigner) Send(ctx context.Context, to string, f *frame.Frame) error {
	return alteringSend(ctx, p.Transport, to, f, p.AlterContribution)
}

func (p shortSigner) AlterContribution(_ context.Context, _ string, f *frame.Frame) (*frame.Frame, error) {
	if f.Kind != frame.KindReduce || len(f.Shape) != 1 || len(f.Payload) != maxWireBytes(f.Codec, f.Shape[0])+sigTrailer {
		return f, nil
	}
	payload, theta, _, err := splitSigned(f.Payload)
	if err != nil {
		return nil, err
	}
	g := *f
	if g.Payload, err = signContribution(p.key, frameSlot(f, f.Shape[0]), payload[:len(payload)-4], theta); err != nil {
		return nil, err
	}
	return &g, nil
}

// gatherReports runs one signed gather of three members, member 2 sending through wrap
// with its own key and θ digest theta2, and returns the misbehaviour the members reported
// and what members 0 and 1 dropped; failing: the honest members' gathers may fail naming
// member 2.
func gatherReports(t *testing.T, wrap func(Transport, ed25519.PrivateKey) Transport, theta2 [thetaLen]byte, failing bool) ([]Misbehaviour, []Rejection) {
	t.Helper()
	keys, ids := nodeKeys(t, 3)
	net := NewInMemory(ids...)
	defer net.Close()
	var mu sync.Mutex
	var rejected []Rejection
	var wg, honest sync.WaitGroup
	// When the honest gathers fail, member 2 waits for their digests in vain: its gather
	// ends once theirs have.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	honest.Add(2)
	if failing {
		go func() { honest.Wait(); cancel2() }()
	}
	for m := range 3 {
		wg.Go(func() {
			if m != 2 {
				defer honest.Done()
			}
			var tr Transport = net.Peer(ids[m])
			theta := [thetaLen]byte{1}
			if m == 2 {
				tr, theta = wrap(tr, keys[m]), theta2
			}
			pol := policy{rule: jobspec.AggregateMean, sign: &signer{key: keys[m], theta: func() [thetaLen]byte { return theta }},
				reject: func(r Rejection) {
					mu.Lock()
					rejected = append(rejected, r)
					mu.Unlock()
				}}
			x := []float32{1 + float32(m), 2, 3, 4}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if m == 2 {
				ctx, cancel = context.WithTimeout(ctx2, 10*time.Second)
			}
			defer cancel()
			err := gatherAggregate(ctx, tr, Group{Members: ids, Self: m}, roundKey{job: 7, step: 3}, 0, x, nil, pol)
			if err != nil && m != 2 && !(failing && strings.Contains(err.Error(), ids[2])) {
				t.Errorf("member %d: %v", m, err)
			}
		})
	}
	wg.Wait()
	reports := net.Misbehaviours()
	for i := range reports {
		if reports[i].Peer != ids[2] || reports[i].By == ids[2] {
			t.Errorf("report %+v: want only member 2 reported, by an honest member", reports[i])
		}
	}
	return reports, rejected
}

// A contribution whose author signed bytes that do not decode is a protocol violation:
// both honest members drop it (as before) and report its author. One altered after
// signing (a signature that fails) or signed against another θ stays a training-level
// judgement: dropped and reported as an offender, its author not disconnected (an honest
// member whose θ parted, or whose bytes a fault flipped, must keep its connection).
func TestUndecodableSignedContributionReportsItsAuthor(t *testing.T) {
	same := [thetaLen]byte{1}
	reports, rejected := gatherReports(t, func(tr Transport, key ed25519.PrivateKey) Transport { return shortSigner{tr, key} }, same, false)
	if len(reports) != 2 || len(rejected) < 2 {
		t.Fatalf("short signed contribution: reports %+v, rejected %+v; want both honest members to report and drop member 2", reports, rejected)
	}
	for name, c := range map[string]struct {
		wrap  func(Transport, ed25519.PrivateKey) Transport
		theta [thetaLen]byte
	}{
		"honest":        {func(tr Transport, _ ed25519.PrivateKey) Transport { return tr }, same},
		"tampered":      {func(tr Transport, _ ed25519.PrivateKey) Transport { return tamperer{tr} }, same},
		"another theta": {func(tr Transport, _ ed25519.PrivateKey) Transport { return tr }, [thetaLen]byte{2}},
	} {
		if reports, _ := gatherReports(t, c.wrap, c.theta, false); len(reports) != 0 {
			t.Errorf("%s: reported %+v", name, reports)
		}
	}
}

// commitBreaker breaks commit-before-reveal: it sends its commitments one byte short
// (short), or its contributions with one bit flipped after it committed to them.
type commitBreaker struct {
	Transport
	short bool
}

func (p commitBreaker) Send(ctx context.Context, to string, f *frame.Frame) error {
	g := *f
	switch {
	case p.short && f.Kind == frame.KindReduce && f.Micro >= commitRound && f.Micro < quorumJoin:
		g.Payload = f.Payload[:len(f.Payload)-1]
	case !p.short && f.Kind == frame.KindReduce && f.DType == frame.DTypeF32:
		g.Payload = slices.Clone(f.Payload)
		g.Payload[0] ^= 1
	}
	return p.Transport.Send(ctx, to, &g)
}

// A member that sends a malformed commitment, or reveals a contribution other than the
// one it committed to, breaks the protocol: both honest members drop its contribution,
// name it and report it, and their gather goes on without it. An honest member's
// contributions keep their commitments (TestUndecodableSignedContributionReportsItsAuthor's
// honest case reports nothing).
func TestBrokenCommitmentReportsItsAuthor(t *testing.T) {
	for name, short := range map[string]bool{"short commitment": true, "another contribution": false} {
		reports, rejected := gatherReports(t, func(tr Transport, _ ed25519.PrivateKey) Transport { return commitBreaker{tr, short} }, [thetaLen]byte{1}, false)
		if len(reports) != 2 {
			t.Errorf("%s: reports %+v, want member 2 reported by both honest members", name, reports)
		}
		for _, r := range reports {
			if !strings.Contains(r.Reason, "commitment") {
				t.Errorf("%s: report %+v does not name the commitment", name, r)
			}
		}
		if n := len(rejected); n < 2 {
			t.Errorf("%s: rejected %+v, want member 2's contribution dropped by both honest members", name, rejected)
		}
	}
}

// shortDigest sends its result digests one byte short.
type shortDigest struct{ Transport }

func (p shortDigest) Send(ctx context.Context, to string, f *frame.Frame) error {
	if f.Kind == frame.KindReduce && f.DType == frame.DTypeU8 && f.Micro < commitRound && len(f.Payload) > 0 {
		g := *f
		g.Payload = f.Payload[:len(f.Payload)-1]
		f = &g
	}
	return p.Transport.Send(ctx, to, f)
}

// A result digest of the wrong length is what no honest member sends: both honest members
// name and report its author; their gather completes.
func TestShortResultDigestReportsItsAuthor(t *testing.T) {
	reports, rejected := gatherReports(t, func(tr Transport, _ ed25519.PrivateKey) Transport { return shortDigest{tr} }, [thetaLen]byte{1}, false)
	if len(reports) != 2 || len(rejected) != 2 {
		t.Fatalf("reports %+v, rejected %+v: want member 2 reported and named by both honest members", reports, rejected)
	}
	for _, r := range reports {
		if !strings.Contains(r.Reason, "result digest of 159 bytes") {
			t.Errorf("report %+v does not name the short digest", r)
		}
	}
}

// roundTruncating sends the frames of rounds [from, to) of every collective one float32
// short: under ZeRO with three members, rounds 15 to 17 are the parameter all-gather's.
type roundTruncating struct {
	Transport
	from, to uint16
}

func (t roundTruncating) Send(ctx context.Context, to string, f *frame.Frame) error {
	if f.Kind == frame.KindReduce && f.Micro >= t.from && f.Micro < t.to && len(f.Payload) >= 4 {
		g := *f
		g.Shape, g.Payload = []int{f.Shape[0] - 1}, f.Payload[:len(f.Payload)-4]
		f = &g
	}
	return t.Transport.Send(ctx, to, f)
}

// Under ZeRO a parameter chunk that does not decode to its owner's chunk length is
// adopted and its owner reported an offender (a training-level consequence, as before),
// and, being what no honest owner sends, its owner is reported to the transport.
func TestShortParameterChunkReportsItsOwner(t *testing.T) {
	const n = 3
	for _, short := range []bool{false, true} {
		cfg := JobConfig{Train: testConfig(), Schedule: jobspec.Schedule1F1B, Sync: DefaultSyncConfig(), Job: 1}
		cfg.Sync.Mode, cfg.Sync.Zero = jobspec.SyncEveryStep, 1
		cfg.Train.Batch, cfg.Train.MicroBatches, cfg.Train.Steps = 2*n, 1, 2
		var plan Plan
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("r%d", i))
			plan.Replicas = append(plan.Replicas, []StagePlan{{Node: names[i], Last: cfg.Train.Model.NumLayers()}})
		}
		net := NewInMemory(names...)
		run, err := NewLocalRun(cfg, plan, testData(), func(node string) Transport {
			if short && node == "r2" {
				return roundTruncating{net.Peer(node), 5 * n, 6 * n}
			}
			return net.Peer(node)
		})
		if err != nil {
			t.Fatal(err)
		}
		err = stepUntilError(run)
		net.Close()
		reports := net.Misbehaviours()
		switch {
		case err != nil:
			t.Fatalf("short %v: %v", short, err)
		case !short && len(reports) != 0:
			t.Fatalf("honest ZeRO run reported %+v", reports)
		case short && len(reports) == 0:
			t.Fatal("a short parameter chunk's owner was not reported")
		}
		for _, m := range reports {
			if m.Peer != "r2" || m.By == "r2" || !strings.Contains(m.Reason, "parameter chunk") {
				t.Errorf("report %+v, want r2's parameter chunk reported by an honest member", m)
			}
		}
	}
}

// recoding is a member that labels its contributions with a codec the round does not use.
type recoding struct{ Transport }

func (p recoding) Send(ctx context.Context, to string, f *frame.Frame) error {
	return alteringSend(ctx, p.Transport, to, f, p.AlterContribution)
}

func (p recoding) AlterContribution(_ context.Context, _ string, f *frame.Frame) (*frame.Frame, error) {
	if f.Kind == frame.KindReduce && f.Codec == frame.CodecNone && f.DType == frame.DTypeF32 {
		g := *f
		g.Codec = frame.CodecFP16
		f = &g
	}
	return f, nil
}

// A contribution of a codec its round does not use fails the gather naming its sender, as
// before, and is a protocol violation: both honest members report the sender.
func TestContributionOfAnotherCodecReportsItsAuthor(t *testing.T) {
	reports, _ := gatherReports(t, func(tr Transport, _ ed25519.PrivateKey) Transport { return recoding{tr} }, [thetaLen]byte{1}, true)
	if len(reports) != 2 {
		t.Fatalf("reports %+v, want member 2 reported by both honest members", reports)
	}
}
