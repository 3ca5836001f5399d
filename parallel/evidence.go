package parallel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// Offender evidence (docs/security.md, "Verifiable offender evidence"; the wire format in
// docs/dataplane.md). A member that only half of a plan names an offender (two colluders
// of four) stays in the plan on the reporters' word: two liars could name two honest
// members the same way. A worker that drops a member therefore keeps what it judged:
// every member's signed contribution of that collective and the θ they were signed
// against. The leader, which is trusted (a voter), checks every signature against the
// author's ID and re-runs the very judge the workers ran (judge, with the policy the
// job's sync mode builds) on a worker of its own: the held-out windows are drawn from
// the job's seed and the step, and the kernels are deterministic, so it reaches the bits
// the honest workers reached. A reporter cannot forge what the accused sent (the accused
// signed it), nor the θ (every author signed its digest).

// Evidence is what a worker judged in one checked gather that dropped a member.
type Evidence struct {
	// The collective: its round key, the round of member 0's contribution (Base), the
	// wire codec and element count of the contributions.
	Job   uint64
	Epoch uint32
	Step  uint32
	// From is, for a DiLoCo outer gather, the step its anchor (Theta) was taken at: the
	// contributions are the work of steps From+1 to Step, and every signature's θ digest
	// binds it (anchorDigest). Zero for every other gather.
	From  uint32
	Index uint16
	Base  uint16
	Codec frame.Codec
	N     uint32
	// Members is the gather's group in order (a quorum's subgroup under DiLoCo);
	// Reporter the position of the worker that kept the evidence.
	Members  []string
	Reporter int
	// Theta is the run's flat weights at the point the contributions were computed
	// against (what each signature's θ digest covers), as a list of one run: only a
	// worker of one run keeps evidence (signer).
	Theta [][]float32
	// Others is, for a pipelined replica's scored gather, each stage's values the
	// reporter's scorer held, received from its replica's other stages: DiLoCo's anchors
	// (anchor_exchange.go), every-step sync's and ZeRO's weights of the stage weight
	// mirror (stage_mirror.go); empty at the reporter's own stage, whose values are
	// Theta. What the score read beside Theta. Each signature binds their digest with
	// Theta's (digests.model), and a leader re-scores with them only when the accused and
	// a majority of the group signed the same. Nil elsewhere.
	Others [][]float32
	// Signed is each member's contribution as it arrived: encoded bytes, digests,
	// signature (signContribution); nil where none verified.
	Signed [][]byte
	// Results is each member's signed digest of the collective's result (32 bytes of
	// SHA-256 signed as a contribution of its round base+R+m, against the same θ:
	// confirmSameResult), nil where none verified; nil when the gather signed none. A
	// leader recomputes the aggregate from Signed with the workers' judge and convicts a
	// member whose signed digest differs.
	Results [][]byte
	// Dropped are the members the worker accuses, sorted: its judge dropped their signed
	// contribution, or their signed result digest differed from its own.
	Dropped []string
	// Kind is what Signed holds: a gather's contributions, or ZeRO's parameter chunks.
	Kind EvidenceKind
}

// Evidence limits: what a decoder accepts before it allocates.
const (
	// MaxEvidenceMembers bounds a gather's group (a uint16 round holds base + member).
	MaxEvidenceMembers = 256
	// MaxEvidenceRuns bounds the runs θ is cut into.
	MaxEvidenceRuns = 1024
	// maxMemberID bounds a member's ID (a peer ID is under 60 bytes).
	maxMemberID = 128
	// MaxEvidenceElements bounds N and each run of θ (1 G elements: 4 GiB of float32).
	MaxEvidenceElements = 1 << 30
)

// evidenceMagic opens an encoded Evidence, with its format's version.
var evidenceMagic = []byte("MNEV\x04")

// errEvidence is evidence that does not decode or does not hold together.
var errEvidence = errors.New("offender evidence")

// evidenceStore keeps, per run (the gather's Index), the evidence of the latest gather
// that dropped a member: bounded to one per run, each replaced by the next drop, so a
// worker holds at most its runs' worth of (R+1) copies of the contributions.
type evidenceStore struct {
	mu     sync.Mutex
	latest map[evidenceKey]*Evidence
}

// evidenceKey is where the store keeps an evidence: its run (the gather's Index) and
// kind, so a parameter chunk's evidence does not displace a gather's.
type evidenceKey struct {
	index uint16
	kind  EvidenceKind
}

// EvidenceKind says what an Evidence's signed messages are.
type EvidenceKind uint8

const (
	// EvidenceGather is a checked gather's contributions (and result digests).
	EvidenceGather EvidenceKind = iota
	// EvidenceParams is a ZeRO parameter all-gather's chunks: Signed holds the accused
	// owner's chunk and the reporter's own, Theta the run's weights before the step
	// (param_evidence.go).
	EvidenceParams
)

// MaxKeptEvidenceBytes bounds one kept evidence (θ and the signed contributions): a
// larger gather (four replicas of a 100M-weight model: ~2 GB) is not kept, and its drop
// can convict nobody on evidence; the store holds at most one per run.
var MaxKeptEvidenceBytes = 256 << 20

// size is what ev holds in memory, θ and the contributions.
func (ev *Evidence) size() int {
	n := 0
	for _, v := range ev.Theta {
		n += 4 * len(v)
	}
	for _, v := range ev.Others {
		n += 4 * len(v)
	}
	for _, p := range ev.Signed {
		n += len(p)
	}
	for _, p := range ev.Results {
		n += len(p)
	}
	return n
}

func (s *evidenceStore) keep(ev *Evidence) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.size() > MaxKeptEvidenceBytes {
		delete(s.latest, evidenceKey{ev.Index % attemptIndexStride, ev.Kind}) // an older drop's evidence is stale
		return
	}
	if s.latest == nil {
		s.latest = map[evidenceKey]*Evidence{}
	}
	s.latest[evidenceKey{ev.Index % attemptIndexStride, ev.Kind}] = ev
}

// Evidence is the evidence of the latest gather of any of the worker's runs that dropped
// member, nil when none did (or the worker signs nothing): what it ships to the leader
// when it names member an offender.
func (w *Worker) Evidence(member string) *Evidence {
	w.evidence.mu.Lock()
	defer w.evidence.mu.Unlock()
	var best *Evidence
	for _, ev := range w.evidence.latest {
		if slices.Contains(ev.Dropped, member) && (best == nil || ev.Step > best.Step) {
			best = ev
		}
	}
	return best
}

// digests is what this member's contributions are bound to: θ and, where the signer
// scores from other stages' anchors, their model's digest.
func (s *signer) digests() digests {
	var model [thetaLen]byte
	if s.model != nil {
		model = s.model()
	}
	return bind(s.theta(), model)
}

// trailer is how many bytes a signature adds to a contribution (0 without a signer).
func (s *signer) trailer() int {
	if s == nil {
		return 0
	}
	return sigTrailer
}

func (k roundKey) slot(round int, wire frame.Codec, n int) slot {
	return slot{Job: k.job, Epoch: k.epoch, Step: k.step, Index: k.index, Round: uint16(round), Codec: wire, N: uint32(n)}
}

// outgoing is this member's contribution as it goes on the wire (signed when s is set),
// and the group's signed contributions so far (nil without a signer).
func (s *signer) outgoing(k roundKey, base int, g Group, wire frame.Codec, n int, payload []byte) ([]byte, [][]byte, error) {
	if s == nil {
		return payload, nil, nil
	}
	out, err := signContribution(s.key, k.slot(base+g.Self, wire, n), payload, s.digests())
	if err != nil {
		return nil, nil, err
	}
	signed := make([][]byte, len(g.Members))
	signed[g.Self] = out
	return out, signed, nil
}

// incoming checks member m's signed contribution p: its signature and that it claims
// this member's own θ (an honest member computed against the same bits). It records p in
// signed when it holds; nil without a signer.
func (s *signer) incoming(k roundKey, base int, g Group, m int, wire frame.Codec, n int, signed [][]byte, p []byte) error {
	if s == nil {
		return nil
	}
	payload, theta, sig, err := splitSigned(p)
	if err != nil {
		return err
	}
	if theta.theta() != s.theta() {
		return fmt.Errorf("%w: computed against another θ (digest %x, ours %x)", errSignature, theta[:4], s.theta())
	}
	if err := verifyContribution(g.Members[m], k.slot(base+m, wire, n), payload, theta, sig); err != nil {
		return err
	}
	signed[m] = p
	return nil
}

// droppedSigned lists the members whose signed contribution the judge dropped (before:
// decoded, after: what judge left).
func droppedSigned(g Group, signed [][]byte, before, after [][]float32) []string {
	var dropped []string
	for m := range before {
		if before[m] != nil && after[m] == nil && signed != nil && signed[m] != nil {
			dropped = append(dropped, g.Members[m])
		}
	}
	return dropped
}

// evidence keeps the gather's signed contributions, and the members' signed result
// digests (results, nil: none), when this member accuses someone of it (accused: its
// judge dropped their signed contribution, or they signed another result).
func (s *signer) evidence(k roundKey, base int, g Group, wire frame.Codec, n int, signed, results [][]byte, accused []string) {
	if s == nil || s.keep == nil || s.thetas == nil || len(accused) == 0 {
		return
	}
	dropped := slices.Compact(slices.Sorted(slices.Values(accused)))
	ev := &Evidence{Job: k.job, Epoch: k.epoch, Step: k.step, From: s.from, Index: k.index, Base: uint16(base), Codec: wire, N: uint32(n),
		Members: slices.Clone(g.Members), Reporter: g.Self, Signed: slices.Clone(signed), Results: slices.Clone(results), Dropped: dropped}
	thetas, n := s.thetas(), 0
	var others [][]float32
	if s.others != nil {
		others = s.others()
	}
	for _, v := range append(slices.Clone(thetas), others...) {
		n += 4 * len(v)
	}
	if ev.size()+n <= MaxKeptEvidenceBytes { // else keep drops it: no copy
		for _, v := range thetas {
			ev.Theta = append(ev.Theta, slices.Clone(v))
		}
		for _, v := range others {
			ev.Others = append(ev.Others, slices.Clone(v))
		}
	}
	s.keep(ev)
}

// Marshal encodes ev (docs/dataplane.md, "Signed contributions and offender evidence").
func (ev *Evidence) Marshal() []byte {
	b := slices.Clone(evidenceMagic)
	b = binary.BigEndian.AppendUint64(b, ev.Job)
	b = binary.BigEndian.AppendUint32(b, ev.Epoch)
	b = binary.BigEndian.AppendUint32(b, ev.Step)
	b = binary.BigEndian.AppendUint32(b, ev.From)
	b = binary.BigEndian.AppendUint16(b, ev.Index)
	b = binary.BigEndian.AppendUint16(b, ev.Base)
	b = append(b, byte(ev.Codec))
	b = binary.BigEndian.AppendUint32(b, ev.N)
	b = binary.BigEndian.AppendUint16(b, uint16(ev.Reporter))
	b = binary.BigEndian.AppendUint16(b, uint16(len(ev.Members)))
	for _, m := range ev.Members {
		b = append(binary.BigEndian.AppendUint16(b, uint16(len(m))), m...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(ev.Theta)))
	for _, v := range ev.Theta {
		b = appendF32(binary.BigEndian.AppendUint32(b, uint32(len(v))), v)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(ev.Others)))
	for _, v := range ev.Others {
		b = appendF32(binary.BigEndian.AppendUint32(b, uint32(len(v))), v)
	}
	for _, p := range ev.Signed {
		b = append(binary.BigEndian.AppendUint32(b, uint32(len(p))), p...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(ev.Dropped)))
	for _, m := range ev.Dropped {
		b = append(binary.BigEndian.AppendUint16(b, uint16(len(m))), m...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(ev.Results)))
	for _, p := range ev.Results {
		b = append(binary.BigEndian.AppendUint32(b, uint32(len(p))), p...)
	}
	return append(b, byte(ev.Kind))
}

// evReader reads an encoded Evidence, checking every length against what is left before
// it allocates: a decoder never allocates more than the message's own length.
type evReader struct {
	b   []byte
	err error
}

func (r *evReader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: %s: %d bytes, %d left", errEvidence, field, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *evReader) u8(field string) uint8 {
	if p := r.take(1, field); p != nil {
		return p[0]
	}
	return 0
}

func (r *evReader) u16(field string) uint16 {
	if p := r.take(2, field); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

func (r *evReader) u32(field string) uint32 {
	if p := r.take(4, field); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (r *evReader) u64(field string) uint64 {
	if p := r.take(8, field); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// count reads a uint16 count and refuses one above max.
func (r *evReader) count(field string, max int) int {
	n := int(r.u16(field))
	if r.err == nil && n > max {
		r.err = fmt.Errorf("%w: %s %d (max %d)", errEvidence, field, n, max)
	}
	if r.err != nil {
		return 0
	}
	return n
}

func (r *evReader) id(field string) string {
	n := int(r.u16(field))
	if r.err == nil && (n == 0 || n > maxMemberID) {
		r.err = fmt.Errorf("%w: %s of %d bytes (1 to %d)", errEvidence, field, n, maxMemberID)
	}
	return string(r.take(n, field))
}

// runs reads a count of float32 runs (at most MaxEvidenceRuns) and each run, its length
// checked against MaxEvidenceElements and what is left before it is allocated.
func (r *evReader) runs(field string) ([][]float32, error) {
	var out [][]float32
	for range r.count(field, MaxEvidenceRuns) {
		n := r.u32(field + " length")
		if r.err == nil && n > MaxEvidenceElements {
			return nil, fmt.Errorf("%w: %s: a run of %d elements (max %d)", errEvidence, field, n, MaxEvidenceElements)
		}
		raw := r.take(4*int(n), field)
		if r.err != nil {
			break
		}
		v := make([]float32, n)
		if err := decodeF32(v, raw); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", errEvidence, field, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// UnmarshalEvidence decodes an Evidence (Marshal's format), refusing lengths beyond the
// limits or the message and anything after it.
func UnmarshalEvidence(p []byte) (*Evidence, error) {
	if !bytes.HasPrefix(p, evidenceMagic) {
		return nil, fmt.Errorf("%w: no magic (or another version)", errEvidence)
	}
	r := &evReader{b: p[len(evidenceMagic):]}
	ev := &Evidence{Job: r.u64("job"), Epoch: r.u32("epoch"), Step: r.u32("step"), From: r.u32("from"), Index: r.u16("index"), Base: r.u16("base"),
		Codec: frame.Codec(r.u8("codec")), N: r.u32("n"), Reporter: int(r.u16("reporter"))}
	if r.err == nil && ev.N > MaxEvidenceElements {
		return nil, fmt.Errorf("%w: %d elements (max %d)", errEvidence, ev.N, MaxEvidenceElements)
	}
	R := r.count("members", MaxEvidenceMembers)
	for range R {
		ev.Members = append(ev.Members, r.id("member"))
	}
	var err error
	if ev.Theta, err = r.runs("runs"); err != nil {
		return nil, err
	}
	if ev.Others, err = r.runs("other stages"); err != nil {
		return nil, err
	}
	bound := maxWireBytes(ev.Codec, int(ev.N)) + sigTrailer
	for range R {
		n := int(r.u32("contribution length"))
		if r.err == nil && n > bound {
			return nil, fmt.Errorf("%w: a contribution of %d bytes (max %d)", errEvidence, n, bound)
		}
		var c []byte
		if n > 0 {
			c = slices.Clone(r.take(n, "contribution"))
		}
		ev.Signed = append(ev.Signed, c)
	}
	for range r.count("dropped", R) {
		ev.Dropped = append(ev.Dropped, r.id("dropped member"))
	}
	nr := r.count("results", R)
	if r.err == nil && nr != 0 && nr != R {
		return nil, fmt.Errorf("%w: %d result digests for %d members", errEvidence, nr, R)
	}
	for range nr {
		n := int(r.u32("result digest length"))
		if r.err == nil && n != 0 && n != resultDigestLen {
			return nil, fmt.Errorf("%w: a result digest of %d bytes (a signed one has %d)", errEvidence, n, resultDigestLen)
		}
		var d []byte
		if n > 0 {
			d = slices.Clone(r.take(n, "result digest"))
		}
		ev.Results = append(ev.Results, d)
	}
	ev.Kind = EvidenceKind(r.u8("kind"))
	if r.err == nil && ev.Kind > EvidenceParams {
		return nil, fmt.Errorf("%w: kind %d", errEvidence, ev.Kind)
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the message", errEvidence, len(r.b))
	}
	if R > 0 && ev.Reporter >= R {
		return nil, fmt.Errorf("%w: reporter %d of %d members", errEvidence, ev.Reporter, R)
	}
	return ev, nil
}

// ErrForgedEvidence is evidence whose contributions are not what their authors signed,
// or that were signed against another θ than the one it ships: the reporter's accusation
// fails.
var ErrForgedEvidence = errors.New("forged offender evidence")

// VerifyEvidence is the leader's check of ev against accused, for the job cfg and plan
// describe, on data (the job's dataset): every contribution must be signed by its author
// for ev's collective and against ev's θ, and the judge the workers run (with the policy
// of the job's sync mode, on a worker of the leader's own at ev's θ and step) must drop
// accused. It returns whether it did and why; an error wrapping ErrForgedEvidence when the
// evidence is forged (a false accusation), any other error when it cannot be checked at
// all (a malformed message, a plan it does not belong to).
func VerifyEvidence(cfg JobConfig, plan Plan, data *model.Dataset, ev *Evidence, accused string) (bool, string, error) {
	if err := ev.consistent(cfg, accused); err != nil {
		return false, "", err
	}
	if ev.Kind == EvidenceParams {
		return verifyParamEvidence(cfg, plan, data, ev, accused)
	}
	if m := slices.IndexFunc(ev.Signed, func(p []byte) bool { return p == nil }); m >= 0 {
		// The judge weighs each contribution beside the others (the median, the distances
		// to it, the reference norm, the scores' upper median, the aggregate a result
		// digest is checked against): a reporter that left out an honest member's
		// contribution could have the leader's judge drop one the workers kept.
		return false, "", fmt.Errorf("%w: no signed contribution of %s: the judge is re-run only on the whole gather", errEvidence, ev.Members[m])
	}
	// The signatures are checked before a worker is built (a forgery costs the leader
	// no model): against either θ digest ev's θ can have (every strategy's, DiLoCo's with
	// its anchor step), then against the one the job's strategy signs (evidenceTheta).
	plain, model := thetaDigest(ev.Theta...), ev.modelDigest()
	anchored := anchorOf(int(ev.From), plain)
	// bound: whose signature binds ev.Others too; scored: the reporter's or the
	// accused's binds some model digest (it scored from other stages' values). The
	// accused's counts too: a reporter signs its own contribution again at will, and
	// without it could have an honest member that scored re-judged by the checks alone.
	bound, scored, accusedAt := make([]bool, len(ev.Members)), false, slices.Index(ev.Members, accused)
	for m, p := range ev.Signed {
		if p == nil {
			continue
		}
		payload, claimed, sig, err := splitSigned(p)
		if err != nil {
			return false, "", fmt.Errorf("%w: %v", ErrForgedEvidence, err)
		}
		if claimed.theta() != plain && claimed.theta() != anchored {
			return false, "", fmt.Errorf("%w: %s's contribution was signed against another θ than the evidence ships", ErrForgedEvidence, ev.Members[m])
		}
		s := slot{Job: ev.Job, Epoch: ev.Epoch, Step: ev.Step, Index: ev.Index, Round: ev.Base + uint16(m), Codec: ev.Codec, N: ev.N}
		if err := verifyContribution(ev.Members[m], s, payload, claimed, sig); err != nil {
			return false, "", fmt.Errorf("%w: %v", ErrForgedEvidence, err)
		}
		bound[m] = claimed.model() == model
		scored = scored || ((m == ev.Reporter || m == accusedAt) && claimed.model() != [thetaLen]byte{})
	}
	if scored && len(ev.Others) == 0 {
		return false, "", fmt.Errorf("%w: the reporter or the accused scored from other stages' values the evidence does not ship", ErrUnboundAnchors)
	}
	w, run, err := newVerifierWorker(cfg, plan, data, ev)
	if err != nil {
		return false, "", err
	}
	defer w.Close()
	theta := w.evidenceTheta(plain, anchored)
	for m, p := range ev.Signed {
		if _, claimed, _, _ := splitSigned(p); claimed.theta() != theta {
			return false, "", fmt.Errorf("%w: %s's contribution was signed against another θ than the job's strategy signs", ErrForgedEvidence, ev.Members[m])
		}
	}
	if err := ev.othersBound(w, bound, accused); err != nil { // before the policy: its score needs them
		return false, "", err
	}
	pol := w.sync.(gatherPolicer).gatherPolicy(run)
	var reasons []Rejection
	pol.reject = func(r Rejection) { reasons = append(reasons, r) }
	// The length rules stay: they only rescale what the judge kept, and the aggregate a
	// result digest is checked against is computed after them (checkResult).
	pol.sign = nil
	codec, err := codecForWire(ev.Codec, cfg.Sync.TopKFraction)
	if err != nil {
		return false, "", fmt.Errorf("%w: %v", errEvidence, err)
	}
	ef := NewErrorFeedback(codec, int(ev.N))
	all := make([][]float32, len(ev.Members))
	for m, p := range ev.Signed {
		if p == nil {
			continue
		}
		v, err := decodeContribution(p[:len(p)-sigTrailer], int(ev.N), ef)
		if err != nil {
			reasons = append(reasons, Rejection{Member: ev.Members[m], Reason: fmt.Sprintf("undecodable: %v", err)})
			continue
		}
		all[m] = v
	}
	scoredOut, err := judge(Group{Members: ev.Members, Self: ev.Reporter}, all, pol)
	if err != nil {
		return false, "", fmt.Errorf("re-judge the evidence: %w", err)
	}
	for _, r := range reasons {
		if r.Member == accused {
			return true, r.Reason, nil
		}
	}
	return ev.checkResult(all, scoredOut, pol, theta, accused)
}

// consistent checks ev's shape: its job and epoch are cfg's, its members unique and
// accused among them, one contribution per member with the accused's and the reporter's
// present.
func (ev *Evidence) consistent(cfg JobConfig, accused string) error {
	R := len(ev.Members)
	switch {
	case ev.Job != cfg.Job || ev.Epoch != cfg.Epoch:
		return fmt.Errorf("%w: job %d epoch %d, the job's is %d epoch %d", errEvidence, ev.Job, ev.Epoch, cfg.Job, cfg.Epoch)
	case R < 2 || len(ev.Signed) != R:
		return fmt.Errorf("%w: %d members, %d contributions", errEvidence, R, len(ev.Signed))
	case len(ev.Theta) == 0:
		// One run, or streaming's every run (launchSigner): verifierWorker matches it to
		// the stage's runs, and every signature's θ digest binds all of them.
		return fmt.Errorf("%w: no θ", errEvidence)
	case ev.Reporter < 0 || ev.Reporter >= R:
		return fmt.Errorf("%w: reporter %d of %d members", errEvidence, ev.Reporter, R)
	case int(ev.Base)+R > math.MaxUint16:
		return fmt.Errorf("%w: rounds from %d for %d members", errEvidence, ev.Base, R)
	}
	seen := map[string]bool{}
	for _, m := range ev.Members {
		if seen[m] {
			return fmt.Errorf("%w: member %s twice", errEvidence, m)
		}
		seen[m] = true
	}
	a := slices.Index(ev.Members, accused)
	switch {
	case a < 0:
		return fmt.Errorf("%w: %s is not a member of the gather", errEvidence, accused)
	case a == ev.Reporter:
		return fmt.Errorf("%w: the reporter accuses itself", errEvidence)
	case ev.Signed[a] == nil || ev.Signed[ev.Reporter] == nil:
		return fmt.Errorf("%w: no signed contribution of the accused or of the reporter", errEvidence)
	}
	return nil
}

// modelDigest is the digest of the whole model ev.Others and ev.Theta make (each stage's
// values in order, ev.Theta at the empty one: the reporter's): what the signatures of a
// pipelined replica's scored gather bind (digests.model: dilocoSync.modelAnchors,
// Worker.mirroredModel); zero without Others.
func (ev *Evidence) modelDigest() [thetaLen]byte {
	if len(ev.Others) == 0 {
		return [thetaLen]byte{}
	}
	var parts [][]float32
	for _, v := range ev.Others {
		if len(v) == 0 {
			parts = append(parts, ev.Theta...)
			continue
		}
		parts = append(parts, v)
	}
	return thetaDigest(parts...)
}

// ErrUnboundAnchors is evidence of a pipelined replica's scored gather whose other
// stages' anchors or mirrored weights (Evidence.Others) are not what the accused and a
// majority of the group signed: the reporter alone vouches for them, and values a
// reporter chose could make an honest contribution score badly. The leader convicts
// nobody on it.
var ErrUnboundAnchors = errors.New("offender evidence: the other stages' anchors are not bound by the group's signatures")

// othersBound checks ev.Others against the verifier worker w: present exactly where the
// reporter's worker scored from other stages' values (a pipelined replica's scorer:
// DiLoCo's anchors, every-step sync's and ZeRO's mirrored weights; othersScorer), one per
// stage of its replica with its own stage's empty, and bound (bound: whose signatures
// cover them) by the reporter, the accused and more than half of the plan's group; then
// loads them into w's scorer and marks them held at ev's step. Evidence of a step the
// reporter could not score (no anchors or mirror that step) ships none and is re-judged
// unscored, as the reporter judged it.
func (ev *Evidence) othersBound(w *Worker, bound []bool, accused string) error {
	if len(ev.Others) == 0 {
		return nil
	}
	sc, hold := w.othersScorer()
	if sc == nil {
		return fmt.Errorf("%w: other stages' anchors for a worker that scores from none", errEvidence)
	}
	if len(ev.Others) != w.numStages {
		return fmt.Errorf("%w: anchors of %d stages, the replica has %d", errEvidence, len(ev.Others), w.numStages)
	}
	for p, v := range ev.Others {
		want := sc.stageSize(p)
		if p == w.stage {
			want = 0
		}
		if len(v) != want {
			return fmt.Errorf("%w: stage %d's anchors hold %d values, want %d", errEvidence, p, len(v), want)
		}
	}
	signers := 0
	for _, b := range bound {
		if b {
			signers++
		}
	}
	group := len(w.runs[0].group.Members)
	if a := slices.Index(ev.Members, accused); !bound[a] || !bound[ev.Reporter] || 2*signers <= group {
		return fmt.Errorf("%w: bound by %d of the group's %d members (the accused's signature: %v, the reporter's: %v)",
			ErrUnboundAnchors, signers, group, bound[a], bound[ev.Reporter])
	}
	for p, v := range ev.Others {
		if p != w.stage {
			if err := sc.loadStageValues(p, v); err != nil {
				return fmt.Errorf("%w: %v", errEvidence, err)
			}
		}
	}
	hold()
	return nil
}

// othersScorer is the scorer a pipelined replica's stage node scores from other stages'
// values with, and hold, which marks them as this step's in the worker (so that its
// policy scores, as the reporter's did): DiLoCo's outer steps score from the anchors the
// stages exchange (anchorsFrom), every-step sync's and ZeRO's gradients from the stage
// weight mirror (mirrorAt: this step's period). Nil for a worker that scores from no
// other stage (one stage, no scorer, streaming).
func (w *Worker) othersScorer() (sc *heldOutScorer, hold func()) {
	if w.numStages <= 1 {
		return nil, nil
	}
	switch s := w.sync.(type) {
	case *dilocoSync:
		if w.scorer != nil {
			return w.scorer, func() { s.anchorsFrom = w.step }
		}
	case everyStep, *zeroSync:
		if sc := w.pipelineScorer(); sc != nil {
			return sc, func() { w.mirrorAt = w.step - w.step%MirrorEvery }
		}
	}
	return nil, nil
}

// verifierWorker is a worker of the reporter's place in plan, at ev's θ and step (and
// the other stages' anchors, where bound: othersBound), and the policy its sync strategy
// gives ev's run: the same code the reporter ran, on weights the leader loaded from the
// evidence.
func verifierWorker(cfg JobConfig, plan Plan, data *model.Dataset, ev *Evidence, bound []bool, accused string) (*Worker, policy, error) {
	w, run, err := newVerifierWorker(cfg, plan, data, ev)
	if err == nil {
		err = ev.othersBound(w, bound, accused) // before the policy: its score needs them
	}
	if err != nil {
		if w != nil {
			w.Close()
		}
		return nil, policy{}, err
	}
	return w, w.sync.(gatherPolicer).gatherPolicy(run), nil
}

// newVerifierWorker is a worker of the reporter's place in plan at ev's θ and step (and
// DiLoCo's anchor step, ev.From), and the index of ev's run among its runs; its sync
// strategy keeps evidence (gatherPolicer).
func newVerifierWorker(cfg JobConfig, plan Plan, data *model.Dataset, ev *Evidence) (*Worker, int, error) {
	w, err := NewWorker(cfg, plan, ev.Members[ev.Reporter], noTransport(ev.Members[ev.Reporter]), data)
	if err != nil {
		return nil, 0, fmt.Errorf("verifier worker: %w", err)
	}
	run := slices.IndexFunc(w.runs, func(r syncRun) bool { return r.first == int(ev.Index%attemptIndexStride) })
	_, ok := w.sync.(gatherPolicer)
	switch {
	case run < 0:
		err = fmt.Errorf("%w: no run of the reporter's stage starts at layer %d", errEvidence, ev.Index%attemptIndexStride)
	case !ok:
		err = fmt.Errorf("%w: the job's sync strategy %T keeps no evidence", errEvidence, w.sync)
	case len(ev.Theta) != len(w.runs):
		err = fmt.Errorf("%w: θ of %d runs, the stage has %d", errEvidence, len(ev.Theta), len(w.runs))
	case countParams(w.runParams[run]) != int(ev.N):
		err = fmt.Errorf("%w: %d elements, run %d has %d", errEvidence, ev.N, run, countParams(w.runParams[run]))
	}
	for _, m := range ev.Members {
		if err == nil && !slices.Contains(w.runs[max(run, 0)].group.Members, m) {
			err = fmt.Errorf("%w: %s is not in the plan's group", errEvidence, m)
		}
	}
	if err == nil {
		err = w.loadTheta(ev.Theta)
	}
	if err == nil {
		w.step, w.verifying = int(ev.Step), true
		err = w.loadAnchorStep(ev)
	}
	if err != nil {
		w.Close()
		return nil, 0, err
	}
	return w, run, nil
}

// loadAnchorStep sets a DiLoCo verifier's anchor step to ev.From, which must be where an
// outer step's inner steps can start: before ev's step by at most the job's inner steps
// (the recomputation an audit runs is that long, no longer). Other strategies bind no
// anchor step; their evidence carries zero.
func (w *Worker) loadAnchorStep(ev *Evidence) error {
	d, ok := w.sync.(*dilocoSync)
	if !ok {
		if ev.From != 0 {
			return fmt.Errorf("%w: an anchor step (%d) in evidence of a %T gather", errEvidence, ev.From, w.sync)
		}
		return nil
	}
	if ev.From >= ev.Step || int(ev.Step-ev.From) > w.cfg.Sync.InnerSteps {
		return fmt.Errorf("%w: inner steps %d–%d, the job's outer steps are every %d", errEvidence, ev.From+1, ev.Step, w.cfg.Sync.InnerSteps)
	}
	d.anchorStep = int(ev.From)
	return nil
}

// evidenceTheta is, of an evidence's θ digest plain and its anchored digest (anchorOf
// its anchor step), the one its signatures must bind on w, loaded from it
// (newVerifierWorker): DiLoCo's binds the anchor step, every other strategy's θ alone.
func (w *Worker) evidenceTheta(plain, anchored [thetaLen]byte) [thetaLen]byte {
	if _, ok := w.sync.(*dilocoSync); ok {
		return anchored
	}
	return plain
}

// loadTheta puts θ into the worker: every-step sync's and ZeRO's weights, DiLoCo's and
// streaming's anchors.
func (w *Worker) loadTheta(theta [][]float32) error {
	for r, ps := range w.runParams {
		if err := loadFlat(ps, theta[r]); err != nil {
			return fmt.Errorf("%w: θ of run %d: %v", errEvidence, r, err)
		}
	}
	d, ok := w.sync.(*dilocoSync)
	if st, isStreaming := w.sync.(*streamingSync); isStreaming {
		d, ok = st.dilocoSync, true
	}
	if ok {
		for r, o := range d.outer {
			o.anchor = slices.Clone(theta[r])
		}
	}
	return nil
}

// noTransport is the transport of a verifier worker: it never sends nor receives.
type noTransport string

func (t noTransport) Self() string { return string(t) }
func (noTransport) Send(context.Context, string, *frame.Frame) error {
	return errors.New("a verifier worker sends nothing")
}
func (noTransport) Recv(context.Context, string, frame.Key) (*frame.Frame, error) {
	return nil, errors.New("a verifier worker receives nothing")
}
