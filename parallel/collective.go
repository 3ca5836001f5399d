package parallel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Group is the set of peers that synchronise one run of layers, in a fixed order (replica
// order) that every member knows; Self is this peer's position.
type Group struct {
	Members []string
	Self    int
}

// roundKey identifies the frames of one collective: job, epoch, step, the group (Index)
// and the round (Micro).
type roundKey struct {
	job   uint64
	epoch uint32
	step  uint32
	index uint16
}

func (k roundKey) frameKey(kind frame.Kind, round int) frame.Key {
	return frame.Key{Kind: kind, Job: k.job, Epoch: k.epoch, Step: k.step, Micro: uint16(round), Index: k.index}
}

func (k roundKey) frame(kind frame.Kind, round int, codec frame.Codec, n int, payload []byte) *frame.Frame {
	return &frame.Frame{Kind: kind, DType: frame.DTypeF32, Codec: codec, Job: k.job, Epoch: k.epoch, Step: k.step,
		Micro: uint16(round), Index: k.index, Shape: []int{n}, Payload: payload}
}

// allReduceMean replaces x by the aggregate (by pol's rule; the mean by default) of every
// member's x. Every member sends its contribution whole (compressed once, with error
// feedback, where a codec is set) to every other, directly: no member relays, and so can
// alter, another's. Each checks and aggregates them in member order (gatherAggregate), so
// every member ends with the same bits; with honest members and no codec the mean has the
// bits the ring all-reduce gave (ringOrderMean).
func allReduceMean(ctx context.Context, tr Transport, g Group, k roundKey, x []float32, ef *ErrorFeedback, pol policy) error {
	if len(g.Members) <= 1 {
		return nil
	}
	return gatherAggregate(ctx, tr, g, k, 0, x, ef, pol)
}

func chunkOf(x []float32, c, R int) []float32 {
	return x[len(x)*c/R : len(x)*(c+1)/R]
}

func mod(a, m int) int { return ((a % m) + m) % m }

// ringAllReduce sums x across the group: a reduce-scatter, after which member i holds the
// full sum of chunk i+1, then an all-gather of the reduced chunks (ZeRO uses the two halves apart).
func ringAllReduce(ctx context.Context, tr Transport, g Group, k roundKey, x []float32) error {
	if err := ringReduceScatter(ctx, tr, g, k, x); err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	if err := ringAllGather(ctx, tr, g, k, x); err != nil {
		return fmt.Errorf("all-reduce: %w", err)
	}
	return nil
}

// gatherAggregate sends this member's contribution (x, compressed by ef when it has a
// codec; in pieces, sendPieces) to every other member directly, in rounds numbered from base (round base+i
// carries member i's contribution), so that no member relays, and so could alter, another's;
// with three members or more, only once every other member has committed to its own
// (commitContributions), so that none can shape its contribution by the others'.
// It decodes each, drops and reports those not admissible, and writes the aggregate of the
// rest into x.
func gatherAggregate(ctx context.Context, tr Transport, g Group, k roundKey, base int, x []float32, ef *ErrorFeedback, pol policy) error {
	R, me := len(g.Members), g.Self
	wire, payloads := frame.CodecNone, make([][]byte, R)
	var own []float32
	if ef != nil && ef.codec.Name() != jobspec.CodecNone {
		wire = ef.codec.Wire()
		payloads[me], own = ef.Encode(x)
	} else {
		payloads[me], own = appendF32(nil, x), slices.Clone(x)
	}
	out, signed, err := pol.sign.outgoing(k, base, g, wire, len(x), payloads[me])
	if err != nil {
		return err
	}
	frames, bad := make([]*frame.Frame, R), make([]error, R)
	for m := range R {
		if m != me {
			frames[m] = k.frame(frame.KindReduce, base+me, wire, len(x), out)
		}
	}
	reveal, commits, err := commitContributions(ctx, tr, g, k, base, frames, bad)
	if err != nil {
		return fmt.Errorf("all-gather: %w", err)
	}
	for m, f := range frames {
		if f != nil {
			if err := sendPieces(reveal, tr, g.Members[m], f); err != nil {
				return err
			}
		}
	}
	for m := range R {
		if m == me || bad[m] != nil { // a malformed commitment: what it commits to is dropped unread
			continue
		}
		f, err := recvPieces(ctx, tr, g.Members[m], k.frameKey(frame.KindReduce, base+m), maxWireBytes(wire, len(x))+pol.sign.trailer())
		if errors.Is(err, errPieces) {
			bad[m] = err
			if pol.sign != nil { // unsigned, a signer's trailer could pass the bound
				misbehaved(tr, g.Members[m], fmt.Sprintf("all-gather: %v", err))
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("all-gather from %s: %w", g.Members[m], err)
		}
		if f.Codec != wire {
			err := fmt.Errorf("all-gather from %s: %w: codec %d, want %d", g.Members[m], errMalformed, f.Codec, wire)
			misbehaved(tr, g.Members[m], err.Error())
			return err
		}
		if bad[m] = checkCommitment(commits, m, f.Payload); bad[m] != nil {
			misbehaved(tr, g.Members[m], fmt.Sprintf("all-gather: %v", bad[m]))
			continue
		}
		payloads[m] = f.Payload
		if bad[m] = pol.sign.incoming(k, base, g, m, wire, len(x), signed, f.Payload); bad[m] == nil && signed != nil {
			payloads[m] = f.Payload[:len(f.Payload)-sigTrailer]
		}
	}
	all := make([][]float32, R)
	for m := range R {
		if m == me {
			all[m] = own
			continue
		}
		v, err := decodeContribution(payloads[m], len(x), ef)
		if bad[m] != nil {
			err = bad[m]
		} else if err != nil && pol.sign != nil {
			// Its author signed bytes that do not decode: no honest member sends them.
			misbehaved(tr, g.Members[m], fmt.Sprintf("all-gather: undecodable contribution: %v", err))
		}
		if err != nil {
			pol.report(g.Members[m], "undecodable: %v", err)
			continue
		}
		all[m] = v
	}
	judged := slices.Clone(all)
	scoredOut, err := judge(g, judged, pol)
	if err != nil {
		return err
	}
	dropped := droppedSigned(g, signed, all, judged)
	if err := aggregateJudged(x, judged, scoredOut, pol, wire); err != nil {
		pol.sign.evidence(k, base, g, wire, len(x), signed, nil, dropped)
		return err
	}
	if pol.auditWait != nil {
		// The other members may still be recomputing the drawn ones: wait for their
		// result digests that much longer.
		ctx = withStallExtra(ctx, pol.auditWait())
	}
	results, diverged, err := confirmSameResult(ctx, tr, g, k, base+R, x, pol)
	pol.sign.evidence(k, base, g, wire, len(x), signed, results, append(dropped, diverged...))
	return err
}

// aggregateJudged writes into x the aggregate of what the judge left of the contributions
// (judged, nil: dropped), scoredOut saying whether the score dropped every one left: what
// every honest member computes, and what a leader recomputes from evidence to tell a
// member that signed another result (VerifyEvidence).
func aggregateJudged(x []float32, judged [][]float32, scoredOut bool, pol policy, wire frame.Codec) error {
	R := len(judged)
	contribs := make([][]float32, 0, R)
	for _, v := range judged {
		if v != nil {
			contribs = append(contribs, v)
		}
	}
	switch {
	case len(contribs) == 0 && scoredOut:
		clear(x) // no contribution lowered the held-out loss: the collective moves nothing
	case len(contribs) == 0:
		return fmt.Errorf("no admissible contribution among %d members", R)
	case len(contribs) == R && !pol.robust() && wire == frame.CodecNone:
		ringOrderMean(x, contribs)
	default:
		combine(x, contribs, pol.rule)
	}
	return nil
}

// judge drops from all (setting it nil) what the policy refuses: the norm check, the
// distance to the median, then the held-out score; it reports each drop and says whether
// the score dropped every contribution left. all holds the decoded contributions in
// member order, nil where one was undecodable. A leader checking a reporter's evidence
// runs this same function (VerifyEvidence).
func judge(g Group, all [][]float32, pol policy) (bool, error) {
	var seed [32]byte
	if pol.audit != nil {
		seed = auditSeed(g.Members, all) // before any check drops one: what every member received
	}
	norms := make([]float64, len(all))
	for m, v := range all {
		norms[m] = math.NaN()
		if v != nil {
			norms[m] = norm2(v)
		}
	}
	ref := pol.normReference(norms)
	for m, v := range all {
		if v == nil {
			continue
		}
		if reason := admissible(norms[m], ref); reason != "" {
			pol.report(g.Members[m], "%s", reason)
			all[m] = nil
		}
	}
	for m, reason := range outliers(all, pol.perSequence(g.Members)) {
		pol.report(g.Members[m], "%s", reason)
		all[m] = nil
	}
	var sent [][]float32 // the contributions the score judges, as received (audited ones passed)
	var audited []int
	if pol.audit != nil {
		failed, drawn, err := pol.audit(g.Members, all, seed, nil)
		if err != nil {
			return false, err
		}
		for m := range all {
			if reason, ok := failed[m]; ok {
				pol.reportProven(g.Members[m], reason)
				all[m] = nil
			}
		}
		sent, audited = slices.Clone(all), drawn
	}
	pol.equaliseSizes(g.Members, all)
	pol.scoreIfPullingApart(all)
	none, err := dropByScore(g, all, pol)
	if err != nil || sent == nil || none {
		// When the score dropped every contribution left (none can be said to lower
		// the held-out loss), it suspects nobody in particular, and recomputing them
		// all would cost each member every other member's work.
		return none, err
	}
	return none, auditScoreDrops(g, sent, all, audited, seed, pol)
}

// auditScoreDrops recomputes the contributions the held-out score dropped (present in
// sent, nil in all) that the draw did not (audited): a drop is the score's suspicion, and
// a recomputation turns it into proof where the contribution is not its author's work. A
// member that replays an honest member's earlier contribution is dropped by the score now
// and then (the step it repeats is already taken) and, audited only when drawn, went on
// replaying (docs/security.md, "Replaying what was seen: audits"); an honest contribution
// the score dropped is recomputed, found to be its author's work and stays dropped, as
// before. Every member scores alike, so every member (and a leader re-judging evidence)
// audits the same ones.
func auditScoreDrops(g Group, sent, all [][]float32, audited []int, seed [32]byte, pol policy) error {
	var targets []int
	for m, v := range sent {
		if v != nil && all[m] == nil && !slices.Contains(audited, m) {
			targets = append(targets, m)
		}
	}
	if len(targets) == 0 {
		return nil
	}
	failed, _, err := pol.audit(g.Members, sent, seed, targets)
	if err != nil {
		return err
	}
	for _, m := range targets {
		if reason, ok := failed[m]; ok {
			pol.reportProven(g.Members[m], reason+" (recomputed as the held-out score dropped it)")
		}
	}
	return nil
}

// dropByScore drops from all (setting it nil) what the policy's held-out score refuses
// and reports it; true when it dropped every contribution left.
func dropByScore(g Group, all [][]float32, pol policy) (bool, error) {
	if pol.score == nil || present(all) < 3 {
		// With two contributions a score cannot tell which member lies, and an honest
		// update near convergence may raise the held-out loss by noise: dropping one of
		// two named honest replicas offenders (the outlier rule needs three too).
		return false, nil
	}
	scores, err := pol.score(all)
	if err != nil {
		return false, err
	}
	left, out := 0, scoreRejections(all, scores)
	for m, reason := range out {
		if reason != "" {
			pol.report(g.Members[m], "%s", reason)
		}
		all[m] = nil
	}
	for _, v := range all {
		if v != nil {
			left++
		}
	}
	if pol.length != nil && left > 0 {
		if err := pol.length(g.Members, all); err != nil {
			return false, err
		}
	}
	return len(out) > 0 && left == 0, nil
}

// confirmSameResult sends a digest of this member's result x (SHA-256 of its bits) to every
// other member directly, in rounds from base (round base+i carries member i's), and
// reports every member whose digest differs: a member that sent different contributions
// to different members (or computed wrongly) leaves the others with different bits, and
// each honest member learns it at once. It adds 32 bytes per peer and one round trip.
// Where the gather is signed, each digest is signed as a contribution of 32 bytes is
// (against the same θ): results holds every member's signed digest (nil where none
// verified), diverged the members whose signed digest differs from this member's, so a
// leader can recompute the aggregate from the signed contributions and convict a member
// that signed another (VerifyEvidence). A digest that does not verify is reported, not
// kept: it convicts nobody.
func confirmSameResult(ctx context.Context, tr Transport, g Group, k roundKey, base int, x []float32, pol policy) (results [][]byte, diverged []string, err error) {
	sum := sha256.Sum256(appendF32(nil, x))
	out, results, err := pol.sign.outgoing(k, base, g, frame.CodecNone, len(sum), sum[:])
	if err != nil {
		return nil, nil, err
	}
	for m := range g.Members {
		if m != g.Self {
			f := k.frame(frame.KindReduce, base+g.Self, frame.CodecNone, len(sum), out)
			f.DType = frame.DTypeU8
			if err := tr.Send(ctx, g.Members[m], f); err != nil {
				return results, diverged, err
			}
		}
	}
	for m := range g.Members {
		if m == g.Self {
			continue
		}
		f, err := tr.Recv(ctx, g.Members[m], k.frameKey(frame.KindReduce, base+m))
		if err != nil {
			return results, diverged, fmt.Errorf("result digest from %s: %w", g.Members[m], err)
		}
		digest := f.Payload
		if want := len(sum) + pol.sign.trailer(); len(f.Payload) != want || f.DType != frame.DTypeU8 {
			// No honest member sends it: a digest is 32 bytes, and the trailer where signed.
			reason := fmt.Sprintf("result digest of %d bytes (dtype %d), want %d", len(f.Payload), f.DType, want)
			pol.report(g.Members[m], "%s", reason)
			misbehaved(tr, g.Members[m], fmt.Sprintf("all-gather: %s: %s", errMalformed, reason))
			continue
		}
		if pol.sign != nil {
			if err := pol.sign.incoming(k, base, g, m, frame.CodecNone, len(sum), results, f.Payload); err != nil {
				pol.report(g.Members[m], "result digest: %v", err)
				continue
			}
			digest = f.Payload[:len(sum)]
		}
		if !bytes.Equal(digest, sum[:]) {
			pol.report(g.Members[m], "ended the collective with different bits (result digest differs)")
			if results != nil {
				diverged = append(diverged, g.Members[m])
			}
		}
	}
	return results, diverged, nil
}

// decodeContribution decodes a member's payload of n values, compressed by ef's codec or
// raw float32.
func decodeContribution(p []byte, n int, ef *ErrorFeedback) ([]float32, error) {
	v := make([]float32, n)
	if ef != nil && ef.codec.Name() != jobspec.CodecNone {
		return v, ef.codec.Decode(v, p)
	}
	return v, decodeF32(v, p)
}

// recvChunk receives round's chunk from prev into dst, adding when add.
func recvChunk(ctx context.Context, tr Transport, prev string, k roundKey, round int, dst []float32, add bool) error {
	f, err := recvPieces(ctx, tr, prev, k.frameKey(frame.KindReduce, round), 4*len(dst))
	if err != nil {
		return fmt.Errorf("round %d: %w", round, err)
	}
	in := make([]float32, len(dst))
	if err := decodeF32(in, f.Payload); err != nil {
		return fmt.Errorf("round %d from %s: %w", round, prev, err)
	}
	for i, v := range in {
		if add {
			dst[i] = v + dst[i]
		} else {
			dst[i] = v
		}
	}
	return nil
}

// ringReduceScatter is the first half of ringAllReduce: after R−1 rounds member i holds the
// sum of chunk i+1 (mod R), added in the same order as ringAllReduce adds it. The other
// chunks of x hold partial sums.
func ringReduceScatter(ctx context.Context, tr Transport, g Group, k roundKey, x []float32) error {
	R, me := len(g.Members), g.Self
	if R <= 1 {
		return nil
	}
	next, prev := g.Members[mod(me+1, R)], g.Members[mod(me-1, R)]
	for r := 0; r < R-1; r++ {
		out := chunkOf(x, mod(me-r, R), R)
		if err := sendPieces(ctx, tr, next, k.frame(frame.KindReduce, r, frame.CodecNone, len(out), appendF32(nil, out))); err != nil {
			return err
		}
		if err := recvChunk(ctx, tr, prev, k, r, chunkOf(x, mod(me-r-1, R), R), true); err != nil {
			return fmt.Errorf("reduce-scatter: %w", err)
		}
	}
	return nil
}

// directReduceScatter leaves in member i's chunk i+1 (mod R) of x the sum of that chunk
// over every member's x, with ringReduceScatter's bits (summed from the chunk's first
// member round the ring, as the ring's partial sums are), but every member sends each of
// its chunks straight to the chunk's owner: no member relays, and so can alter, another's
// partial sum, and the owner sees every contribution to its chunk. The bytes are the
// ring's ((R−1)/R of x per member), in one round instead of R−1. It returns those
// contributions, in member order (this member's own included).
func directReduceScatter(ctx context.Context, tr Transport, g Group, k roundKey, x []float32) ([][]float32, error) {
	R, me := len(g.Members), g.Self
	for m := range R {
		if m != me {
			out := chunkOf(x, mod(m+1, R), R)
			if err := sendPieces(ctx, tr, g.Members[m], k.frame(frame.KindReduce, me, frame.CodecNone, len(out), appendF32(nil, out))); err != nil {
				return nil, err
			}
		}
	}
	own := mod(me+1, R)
	dst := chunkOf(x, own, R)
	parts := make([][]float32, R)
	parts[me] = slices.Clone(dst)
	for m := range R {
		if m == me {
			continue
		}
		f, err := recvPieces(ctx, tr, g.Members[m], k.frameKey(frame.KindReduce, m), 4*len(dst))
		if err != nil {
			return nil, fmt.Errorf("reduce-scatter from %s: %w", g.Members[m], err)
		}
		parts[m] = make([]float32, len(dst))
		if err := decodeF32(parts[m], f.Payload); err != nil {
			return nil, fmt.Errorf("reduce-scatter from %s: %w", g.Members[m], err)
		}
	}
	copy(dst, parts[own])
	for j := 1; j < R; j++ {
		v := parts[(own+j)%R]
		for i := range dst {
			dst[i] += v[i]
		}
	}
	return parts, nil
}

// ringAllGather is the second half of ringAllReduce: member i contributes chunk i+1 (mod R)
// of x and ends with every member's chunk. Its rounds follow ringReduceScatter's (R−1 …
// 2R−3), so both may share a round key.
func ringAllGather(ctx context.Context, tr Transport, g Group, k roundKey, x []float32) error {
	R, me := len(g.Members), g.Self
	if R <= 1 {
		return nil
	}
	next, prev := g.Members[mod(me+1, R)], g.Members[mod(me-1, R)]
	for r := 0; r < R-1; r++ {
		out := chunkOf(x, mod(me+1-r, R), R)
		round := R - 1 + r
		if err := sendPieces(ctx, tr, next, k.frame(frame.KindReduce, round, frame.CodecNone, len(out), appendF32(nil, out))); err != nil {
			return err
		}
		if err := recvChunk(ctx, tr, prev, k, round, chunkOf(x, mod(me-r, R), R), false); err != nil {
			return fmt.Errorf("all-gather: %w", err)
		}
	}
	return nil
}

// allGatherScalars sends v to every other member and returns every member's value in
// member order.
func allGatherScalars(ctx context.Context, tr Transport, g Group, k roundKey, v float64) ([]float64, error) {
	if err := sendScalar(ctx, tr, g, k, v); err != nil {
		return nil, err
	}
	return recvScalars(ctx, tr, g, k, v)
}

// sendScalar sends v to every other member: the first half of allGatherScalars, which a
// caller may start early and finish with recvScalars later, to hide its round trip.
func sendScalar(ctx context.Context, tr Transport, g Group, k roundKey, v float64) error {
	payload := binary.LittleEndian.AppendUint64(nil, math.Float64bits(v))
	for i, m := range g.Members {
		if i == g.Self {
			continue
		}
		f := &frame.Frame{Kind: frame.KindScalar, DType: frame.DTypeU8, Job: k.job, Epoch: k.epoch, Step: k.step,
			Micro: uint16(g.Self), Index: k.index, Shape: []int{8}, Payload: payload}
		if err := tr.Send(ctx, m, f); err != nil {
			return err
		}
	}
	return nil
}

// recvScalars receives every other member's scalar and returns all of them, own (v)
// included, in member order.
func recvScalars(ctx context.Context, tr Transport, g Group, k roundKey, v float64) ([]float64, error) {
	out := make([]float64, len(g.Members))
	out[g.Self] = v
	for i, m := range g.Members {
		if i == g.Self {
			continue
		}
		f, err := tr.Recv(ctx, m, frame.Key{Kind: frame.KindScalar, Job: k.job, Epoch: k.epoch, Step: k.step, Micro: uint16(i), Index: k.index})
		if err != nil {
			return nil, err
		}
		if len(f.Payload) != 8 {
			return nil, fmt.Errorf("scalar from %s has %d bytes", m, len(f.Payload))
		}
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(f.Payload))
	}
	return out, nil
}

// present counts the contributions of all not yet dropped.
func present(all [][]float32) int {
	n := 0
	for _, v := range all {
		if v != nil {
			n++
		}
	}
	return n
}
