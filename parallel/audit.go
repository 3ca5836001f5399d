package parallel

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
)

// Audits: verification of work by sampled recompute (BTARD-SGD's validators, Gorbunov et
// al. 2021). The checks of a gather (norm, distance, held-out score) judge what a
// contribution looks like; a member that replays an honest contribution it saw in an
// earlier gather sends one that looks right and is not the work of this gather
// (docs/security.md, "Replaying what was seen"). What a member must send is a function
// of public inputs: the weights the gather starts from (every-step sync's θ, DiLoCo's
// anchor), the member's batches (drawn from the job's seed and its place in the plan) and
// the deterministic kernels, once DiLoCo's inner AdamW starts each outer step from zero
// moments (resetInnerMoments). So any member can compute it again.
//
// In every audited gather each member is drawn for an audit with probability
// Audit/present, from a seed every member computes alike and nobody knows before the
// contributions are revealed: the SHA-256 of every contribution received (auditSeed).
// A contribution is committed to before it is revealed (commit.go), so none can be chosen
// to dodge the draw. Every member (and a leader re-judging evidence) recomputes the drawn
// members' contributions and drops one farther than AuditTolerance of its length from its
// recomputation: the drop is proof, so its author is named at once and left out of every
// later gather of the run (banned), and its evidence convicts it at the leader.
// Each contribution the held-out score then drops that the draw did not pick is recomputed
// too (auditScoreDrops, collective.go): a replay the score catches is proof as well.

// AuditTolerance is the relative distance ‖c − c'‖ / ‖c'‖ within which a recomputed
// contribution c' vouches for the contribution c a member sent. A member on the pure-Go
// kernels ends a 50-step outer step of the default model 1.77e-5 of its length from one on
// AVX-512 (the AVX2 path has AVX-512's bits; TestAuditAcrossKernels, docs/security.md); a
// replay is of the order of the update itself away, and a blend that hides within the
// tolerance carries a thousandth of one.
const AuditTolerance = 1e-3

// Audits reports whether the worker's gathers are audited (audits).
func (w *Worker) Audits() bool { return w.audits() }

// audits says whether w's gathers are audited: the job asks for it, and every replica of
// the plan is one resident stage on the CPU with every weight trained, so that a member's
// contribution is its own computation alone and any member can run it again. The
// conditions are the job's and the plan's, so every member and a leader decide alike.
func (w *Worker) audits() bool {
	c := w.cfg
	if !(c.Sync.Audit > 0) || c.Sync.Codec == jobspec.CodecTopK || c.Sync.Zero > 0 || c.Train.LoRA != nil {
		return false
	}
	if c.Sync.Mode != jobspec.SyncDiLoCo && c.Sync.Mode != jobspec.SyncEveryStep {
		return false
	}
	if be := c.Train.Backend; be != nil && !be.Device().IsHost() {
		return false
	}
	for _, stages := range w.plan.Replicas {
		if len(stages) != 1 || stages[0].MemoryBudget > 0 {
			return false
		}
	}
	return len(w.runs) == 1
}

// auditPoint is what a gather's contributions were computed from: the run's weights
// (every-step sync's before the step's update, DiLoCo's anchor) and the sampler steps they
// cover (DiLoCo: the outer step's inner steps; every-step sync: the step's gradient).
type auditPoint struct {
	theta       []float32
	start, span int
	outer       bool // DiLoCo: span AdamW steps from θ, contribution θ − θ'
}

// auditSeed is the seed of a gather's draw: the SHA-256 of every contribution present, in
// member order (each behind its member's ID and a presence byte), its float32s encoded a
// chunk at a time (a contribution is as large as the model).
func auditSeed(members []string, all [][]float32) [sha256.Size]byte {
	const chunk = 16 << 10 // elements
	h := sha256.New()
	var buf []byte
	for m, v := range all {
		buf = binary.AppendUvarint(buf[:0], uint64(len(members[m])))
		buf = append(buf, members[m]...)
		if v == nil {
			h.Write(append(buf, 0))
			continue
		}
		h.Write(append(buf, 1))
		for len(v) > 0 {
			n := min(len(v), chunk)
			buf = appendF32(buf[:0], v[:n])
			h.Write(buf)
			v = v[n:]
		}
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// auditDraw returns the members of all (present ones) drawn for an audit at rate
// (expected audits per gather): member m is drawn when the first 8 bytes of
// SHA-256(seed, m's ID), read as a fraction of 2⁶⁴, are under rate / present.
func auditDraw(seed [sha256.Size]byte, members []string, all [][]float32, rate float64) []int {
	p := rate / float64(present(all))
	var out []int
	for m, v := range all {
		if v == nil {
			continue
		}
		d := sha256.Sum256(append(seed[:], members[m]...))
		if float64(binary.BigEndian.Uint64(d[:8]))/math.Exp2(64) < p {
			out = append(out, m)
		}
	}
	return out
}

// auditGather recomputes the drawn contributions of a gather (positions in all) at point
// and returns, by member, why each that is not its author's work is dropped. self is the
// position not to audit (the worker's own contribution), -1 for a leader's re-judge.
func (w *Worker) auditGather(ctx context.Context, members []string, all [][]float32, drawn []int, self int, at auditPoint) (map[int]string, error) {
	out := map[int]string{}
	for _, m := range drawn {
		if m == self {
			continue
		}
		want, err := w.recompute(ctx, members[m], at)
		if err != nil {
			return nil, fmt.Errorf("audit of %s: %w", members[m], err)
		}
		w.audited.Add(1)
		if w.codec.Name() != jobspec.CodecNone {
			// What the member sends: its work through the codec, without error feedback
			// in an audited job (ErrorFeedback.memoryless).
			sent := make([]float32, len(want))
			if err := w.codec.Decode(sent, w.codec.Encode(nil, want)); err != nil {
				return nil, fmt.Errorf("audit of %s: %w", members[m], err)
			}
			want = sent
		}
		if d := relDistance(all[m], want); !(d <= AuditTolerance) {
			out[m] = fmt.Sprintf("audit: the contribution is %.3g of its length from the member's own work recomputed (steps %d–%d), over the tolerance %g", d, at.start+1, at.start+at.span, AuditTolerance)
		}
	}
	return out, nil
}

// relDistance is ‖c − want‖ / ‖want‖: 0 when they are equal, +Inf when c is not finite
// or want is zero and c is not, NaN (no tolerance holds it) when want is not finite.
func relDistance(c, want []float32) float64 {
	d := distance(c, want)
	if d == 0 {
		return 0
	}
	return d / norm2(want)
}

// recompute is the contribution member (one whole-model replica of the plan) sends when
// honest at point at: its batches' work, run on a solo worker of the job's model (the
// same code its worker runs), weighed by its batch share.
func (w *Worker) recompute(ctx context.Context, member string, at auditPoint) ([]float32, error) {
	r, _, ok := w.plan.locate(member)
	if !ok {
		return nil, fmt.Errorf("%s has no stage in the plan", member)
	}
	batch, offset, global := w.plan.replicaBatch(r, w.cfg.Train.Batch)
	sw, err := w.auditWorker(batch)
	if err != nil {
		return nil, err
	}
	sw.sampler = model.Sampler{Train: w.data.Train, Batch: batch, Context: w.cfg.Train.Model.Context,
		Seed: w.cfg.Train.Seed, RowOffset: offset, GlobalBatch: global}
	sw.syncWeight = float32(w.numReplicas*batch) / float32(global)
	if err := loadFlat(sw.runParams[0], at.theta); err != nil {
		return nil, err
	}
	sw.step = at.start
	if !at.outer {
		sw.ws.Reset()
		if err := sw.state.BeginStep(); err != nil {
			return nil, err
		}
		defer sw.state.EndStep()
		if _, err := sw.passes(ctx); err != nil {
			return nil, err
		}
		g := flattenGrads(sw.runParams[0])
		sw.weigh(g)
		return g, nil
	}
	if err := sw.resetInnerMoments(); err != nil {
		return nil, err
	}
	for range at.span {
		if _, err := sw.Step(ctx); err != nil {
			return nil, err
		}
	}
	delta := flattenValues(sw.runParams[0])
	for j, v := range at.theta {
		delta[j] = v - delta[j]
	}
	sw.weigh(delta)
	return delta, nil
}

// auditWorker is w's solo worker for recomputations of replicas of batch sequences: the
// whole model in one resident stage, synchronising with nobody. It is built again only
// when the micro-batch count changes (the schedule its state was built for); replicas
// whose batches differ above the job's micro_batches share it.
func (w *Worker) auditWorker(batch int) (*Worker, error) {
	if a := w.auditor; a != nil && a.micro == min(w.cfg.Train.MicroBatches, batch) {
		a.batch = batch
		return a, nil
	}
	if w.auditor != nil {
		w.auditor.Close()
		w.auditor = nil
	}
	cfg := w.cfg
	cfg.Train.Batch = batch
	cfg.Sync = SyncConfig{Mode: jobspec.SyncEveryStep, Codec: jobspec.CodecNone}
	plan := Plan{Replicas: [][]StagePlan{{{Node: soloNode, First: 0, Last: cfg.Train.Model.NumLayers()}}}}
	sw, err := NewWorker(cfg, plan, soloNode, soloTransport{}, w.data)
	if err != nil {
		return nil, fmt.Errorf("audit worker: %w", err)
	}
	w.auditor = sw
	return sw, nil
}

// resetInnerMoments starts AdamW again from zero moments and step count: DiLoCo's inner
// optimizer at each outer step of an audited job, so that a member's next outer step is a
// function of public inputs alone.
func (w *Worker) resetInnerMoments() error {
	st, ok := w.state.(*residentState)
	if !ok || st.opt == nil {
		return fmt.Errorf("inner moments of a %T cannot be reset", w.state)
	}
	for _, p := range st.params {
		clear(st.opt.m[p.Name].Data)
		clear(st.opt.v[p.Name].Data)
	}
	st.opt.Steps = 0
	return nil
}

// ban leaves member out of every later gather of the run (an audit proved it sent what
// it did not compute): applied once the step ends (applyBans), so that the gather in
// progress finishes as every member started it.
func (w *Worker) ban(member string) {
	w.rejectMu.Lock()
	defer w.rejectMu.Unlock()
	if !slices.Contains(w.pendingBans, member) {
		w.pendingBans = append(w.pendingBans, member)
	}
}

// applyBans bans the members an audit convicted during the step: outer steps no longer
// wait for them nor count them (they are retired, as a dead member is, and never
// readmitted), and every-step sync's gathers run without them (activeGroup).
func (w *Worker) applyBans() {
	w.rejectMu.Lock()
	bans := w.pendingBans
	w.pendingBans = nil
	w.rejectMu.Unlock()
	if len(bans) > 0 {
		w.peers.ban(bans...)
	}
}

// activeGroup is g without its banned members, Self moved to match; g itself when none
// is. A member the control plane retired (dead) stays: every-step sync has no quorum, and
// its gather fails on the dead member as before, for the control plane's new plan.
func (w *Worker) activeGroup(g Group) Group {
	if !slices.ContainsFunc(g.Members, w.peers.isBanned) {
		return g
	}
	out := Group{Self: -1}
	for m, id := range g.Members {
		if w.peers.isBanned(id) && m != g.Self {
			continue
		}
		if m == g.Self {
			out.Self = len(out.Members)
		}
		out.Members = append(out.Members, id)
	}
	return out
}

// auditPolicy sets pol's audit (and ban) where w's gathers are audited; at gives the
// point the gather's contributions were computed from, when the judge runs.
func (w *Worker) auditPolicy(pol *policy, at func() auditPoint) {
	if !w.audits() {
		return
	}
	pol.audit = func(members []string, all [][]float32, seed [32]byte, targets []int) (map[int]string, []int, error) {
		self := slices.Index(members, w.Self())
		if w.verifying {
			self = -1
		}
		point, drawn := at(), targets
		if drawn == nil {
			drawn = auditDraw(seed, members, all, w.cfg.Sync.Audit)
		}
		wait := int64(AuditWaitFactor * len(drawn) * point.span * int(w.computeEMA.Load()))
		if targets == nil {
			w.auditWait.Store(wait)
		} else {
			w.auditWait.Add(wait) // the score's suspects, after the draw's
		}
		failed, err := w.auditGather(context.Background(), members, all, drawn, self, point)
		return failed, drawn, err
	}
	pol.ban = w.ban
	pol.auditWait = func() time.Duration { return time.Duration(w.auditWait.Load()) }
}

// AuditWaitFactor is how many times this member's own time for a drawn member's work a
// gather waits, beyond the stall timeout, for the others' result digests after its audits:
// the others recompute the drawn members (a drawn member does not recompute itself), and
// a slower member takes longer. A member more than this much slower than the waiting one
// stalls the gather past the timeout, failing the step as any silent member does.
const AuditWaitFactor = 4

// noteCompute folds a step's compute time into the average audits wait by.
func (w *Worker) noteCompute(d time.Duration) {
	old := w.computeEMA.Load()
	if old == 0 {
		w.computeEMA.Store(int64(d))
		return
	}
	w.computeEMA.Store(old + (int64(d)-old)/8)
}

// stallKey carries a longer wait for peers' frames in a context (withStallExtra).
type stallKey struct{}

// withStallExtra returns ctx under which a worker's transport waits d longer than its
// stall timeout for each frame.
func withStallExtra(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, stallKey{}, d)
}

// stallExtra is what withStallExtra added to ctx (0: nothing).
func stallExtra(ctx context.Context) time.Duration {
	d, _ := ctx.Value(stallKey{}).(time.Duration)
	return d
}

// CheckAudit checks Audit against the fields it depends on, under the names the caller
// gives them (the engine's, or a command's flags).
func (c SyncConfig) CheckAudit(audit, mode, codec, zero string) error {
	switch {
	case !(c.Audit >= 0 && c.Audit <= MaxAudit):
		return fmt.Errorf("%s must be ≥ 0 and ≤ %d (members audited per gather), got %v", audit, MaxAudit, c.Audit)
	case c.Audit == 0:
		return nil
	case c.Mode != jobspec.SyncDiLoCo && c.Mode != jobspec.SyncEveryStep:
		return fmt.Errorf("%s needs %s diloco or sync (streaming overlaps its outer steps with the inner ones), got %s", audit, mode, c.Mode)
	case c.Codec == jobspec.CodecTopK:
		return fmt.Errorf("%s needs %s none, fp16 or int8 (an audited job sends without error feedback, which topk cannot do without), got %s", audit, codec, c.Codec)
	case c.Zero > 0:
		return fmt.Errorf("%s needs %s 0 (ZeRO gathers gradient chunks, not whole contributions), got %d", audit, zero, c.Zero)
	}
	return nil
}
