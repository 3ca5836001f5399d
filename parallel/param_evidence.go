package parallel

import (
	"crypto/ed25519"
	"fmt"
	"math"
	"slices"

	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// Signed parameter chunks. Under ZeRO each member updates the chunk of the parameters it
// owns and sends it to every other (gatherParams), which refuse a chunk that moves a
// weight further than one honest AdamW step can (paramLimit). A refusal was a report
// only: two colluders of four that shrink the chunks they own are named by both honest
// members, which is not a majority, and nothing let a leader tell who lied. Where the
// members sign (their transport holds the node key), each owner now signs its chunk as a
// contribution of round base+m against the digest of the run's weights before the step
// (the same bits on every honest member: the last all-gather left them so), and a
// receiver that refuses a chunk keeps it as evidence (EvidenceParams) with those
// weights. The leader checks the owner's signature and the digest, takes the owner's
// chunk of the weights before the step and refuses or takes the chunk by the same
// limit (at the evidence's step, over every AdamW step count up to it: an honest owner's
// count is never larger, so its chunk is never convicted). A chunk signed against
// another θ is refused as undecodable and convicts nobody, as with contributions.

// paramsBefore is what run i's parameter chunks are signed against: the digest of the
// run's weights before the step's update, and this member's own chunk of them (the only
// chunk the update changes before the all-gather), from which a refusal's evidence
// rebuilds those weights. nil when the worker signs nothing.
type paramsBefore struct {
	key    ed25519.PrivateKey
	digest [thetaLen]byte
	chunk  int       // this member's chunk of the run's flat weights
	mine   []float32 // its values before the update
}

// paramsBefore digests run i's weights before the step's update and copies this member's
// chunk of them, when the worker signs: one SHA-256 of the run and a copy of 1/R of it per
// step, no copy of the whole run.
func (w *Worker) paramsBefore(i int) *paramsBefore {
	if w.signKey == nil {
		return nil
	}
	ps, g := w.runParams[i], w.runs[i].group
	R := len(g.Members)
	b := &paramsBefore{key: w.signKey, digest: paramsDigest(ps), chunk: mod(g.Self+1, R)}
	n := countParams(ps)
	b.mine = flatRange(ps, n*b.chunk/R, n*(b.chunk+1)/R)
	return b
}

// flatRange copies elements [lo, hi) of ps' values taken as one flat vector.
func flatRange(ps []*model.Param, lo, hi int) []float32 {
	out := make([]float32, 0, hi-lo)
	at := 0
	for _, p := range ps {
		d := p.Value.Data
		if a, e := max(lo, at), min(hi, at+len(d)); a < e {
			out = append(out, d[a-at:e-at]...)
		}
		at += len(d)
	}
	return out
}

// theta is the run's flat weights before the update: x (the run's values after this
// member's update, before the all-gather took any chunk) with this member's chunk put back.
func (b *paramsBefore) theta(x []float32, R int) []float32 {
	out := slices.Clone(x)
	copy(chunkOf(out, b.chunk, R), b.mine)
	return out
}

// trailer is what a signed chunk carries after its float32 bytes (0 unsigned).
func (b *paramsBefore) trailer() int {
	if b == nil {
		return 0
	}
	return sigTrailer
}

// sign is payload, this owner's chunk, signed for slot s against the weights before the
// step; payload itself when unsigned.
func (b *paramsBefore) sign(s slot, payload []byte) ([]byte, error) {
	if b == nil {
		return payload, nil
	}
	return signContribution(b.key, s, payload, bind(b.digest, [thetaLen]byte{}))
}

// open returns a received chunk's float32 bytes, checking its length (n bytes, plus the
// trailer when signed): another length is no chunk an honest owner sends.
func (b *paramsBefore) open(p []byte, n int) ([]byte, error) {
	if len(p) != n+b.trailer() {
		return nil, fmt.Errorf("%d bytes, want %d", len(p), n+b.trailer())
	}
	return p[:n], nil
}

// verify checks member's signed chunk p for slot s: its signature, and that it was
// computed from this member's own weights before the step. nil when unsigned.
func (b *paramsBefore) verify(member string, s slot, p []byte) error {
	if b == nil {
		return nil
	}
	payload, d, sig, err := splitSigned(p)
	if err != nil {
		return err
	}
	if d.theta() != b.digest {
		th := d.theta()
		return fmt.Errorf("%w: updated from other weights (digest %x, ours %x)", errSignature, th[:4], b.digest[:4])
	}
	return verifyContribution(member, s, payload, d, sig)
}

// keepParamEvidence keeps the signed chunks the limit refused (refused, by owner; nil
// where taken) beside this member's own (mine) and the run's weights before the step
// (rebuilt from ps, which the all-gather has not written yet), where the worker keeps
// evidence (one run; unsigned: none).
func (w *Worker) keepParamEvidence(k roundKey, base int, g Group, ps []*model.Param, b *paramsBefore, mine []byte, refused [][]byte) {
	if b == nil || len(w.runs) != 1 || !slices.ContainsFunc(refused, func(p []byte) bool { return p != nil }) {
		return
	}
	theta := b.theta(flattenValues(ps), len(g.Members))
	ev := &Evidence{Job: k.job, Epoch: k.epoch, Step: k.step, Index: k.index, Base: uint16(base), Codec: frame.CodecNone,
		N: uint32(len(theta)), Members: slices.Clone(g.Members), Reporter: g.Self, Theta: [][]float32{theta},
		Signed: make([][]byte, len(g.Members)), Kind: EvidenceParams}
	for m, p := range refused {
		if p != nil {
			ev.Signed[m] = slices.Clone(p)
			ev.Dropped = append(ev.Dropped, g.Members[m])
		}
	}
	slices.Sort(ev.Dropped)
	ev.Signed[g.Self] = mine
	w.evidence.keep(ev)
}

// verifyParamEvidence is VerifyEvidence for a ZeRO parameter chunk: the accused's chunk
// must be signed by it for its round against the digest of the evidence's weights, and
// the leader convicts when the chunk moves a weight of the accused's chunk of those
// weights further than one honest AdamW step at the evidence's step can.
func verifyParamEvidence(cfg JobConfig, plan Plan, data *model.Dataset, ev *Evidence, accused string) (bool, string, error) {
	w, _, err := verifierWorker(cfg, plan, data, ev, make([]bool, len(ev.Members)), accused)
	if err != nil {
		return false, "", err
	}
	defer w.Close()
	if _, ok := w.sync.(*zeroSync); !ok || len(ev.Theta) != 1 {
		return false, "", fmt.Errorf("%w: parameter chunks of a job that does not run ZeRO on one run", errEvidence)
	}
	R, a := len(ev.Members), slices.Index(ev.Members, accused)
	old := chunkOf(ev.Theta[0], mod(a+1, R), R)
	payload, d, sig, err := splitSigned(ev.Signed[a])
	if err != nil || len(payload) != 4*len(old) {
		return false, "", fmt.Errorf("%w: %s's parameter chunk of %d bytes, want %d signed: %v", ErrForgedEvidence, accused, len(payload), 4*len(old), err)
	}
	if d.theta() != thetaDigest(ev.Theta...) {
		return false, "", fmt.Errorf("%w: %s's chunk was signed against other weights than the evidence ships", ErrForgedEvidence, accused)
	}
	s := slot{Job: ev.Job, Epoch: ev.Epoch, Step: ev.Step, Index: ev.Index, Round: ev.Base + uint16(a), Codec: frame.CodecNone, N: uint32(len(old))}
	if err := verifyContribution(accused, s, payload, d, sig); err != nil {
		return false, "", fmt.Errorf("%w: %v", ErrForgedEvidence, err)
	}
	in := make([]float32, len(old))
	if err := decodeF32(in, payload); err != nil {
		return false, "", fmt.Errorf("%w: %v", errEvidence, err)
	}
	h := cfg.Train.adamW()
	h.LR = LearningRate(int(ev.Step), cfg.Train.LR, cfg.Train.Warmup, cfg.Train.Steps)
	var sup supBound
	lim := paramLimit{lr: h.LR, wd: math.Abs(h.WeightDecay), b: sup.upTo(h, int(ev.Step)+1)}
	if reason := lim.reason(in, old); reason != "" {
		return true, "parameter chunk " + reason, nil
	}
	return false, "the leader finds " + accused + "'s parameter chunk within one AdamW step", nil
}
