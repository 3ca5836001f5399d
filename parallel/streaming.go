package parallel

import (
	"context"
	"fmt"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"sync/atomic"

	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// Streaming DiLoCo (Douillard et al. 2025, "Streaming DiLoCo with overlapping
// communication"): the model's layers are cut into F contiguous fragments of about equal
// parameter counts (layerFragments; the paper strides layers, contiguous fragments keep
// runs of layers whole) and each fragment
// runs DiLoCo's outer step on its own schedule, fragment f after the steps s ≡ ⌊f·H/F⌋
// (mod H). A fragment's pseudo-gradient is all-reduced beside the next τ (Overlap) inner
// steps and its averaged update is applied when they are done, mixed with what the
// replica learnt meanwhile (MixLocal). Each synchronisation moves about 1/F of the model,
// so the peak traffic of one sync event is DiLoCo's ÷ F for the same total. The last step
// of the schedule waits for every fragment in flight and synchronises every fragment once
// more without overlap, so training ends with identical replicas. The per-fragment outer
// step is DiLoCo's own (syncRun, applyOuter), run on the fragment's runs of layers.

// validateStreaming names streaming's bad fields; the bound by the model's layers is
// checked where the model is known (checkFragments, from NewWorker).
func (c SyncConfig) validateStreaming() []error {
	var errs []error
	if err := c.checkFragments(0); err != nil {
		errs = append(errs, err)
	}
	if c.Overlap < 0 || (c.InnerSteps >= 1 && c.Overlap >= c.InnerSteps) {
		errs = append(errs, fmt.Errorf("overlap must be ≥ 0 and < inner-steps (%d) (got %d)", c.InnerSteps, c.Overlap))
	}
	if !(c.MixLocal >= 0 && c.MixLocal < 1) {
		errs = append(errs, fmt.Errorf("mix-local must be in [0, 1) (got %g)", c.MixLocal))
	}
	return errs
}

// checkFragments validates Fragments (0 meaning 1) by the job spec's rule, against the
// model's blocks where known (> 0).
func (c SyncConfig) checkFragments(blocks int) error {
	f := c.Fragments
	if f == 0 {
		f = 1
	}
	return jobspec.CheckFragments(f, blocks, c.InnerSteps, engineNames)
}

// fragments is F, with 0 meaning 1.
func (c SyncConfig) fragments() int { return max(c.Fragments, 1) }

// layerFragments assigns the model's layers to F contiguous fragments of about equal
// parameter counts, so that each sync event moves about 1/F of the model: a layer belongs
// to the fragment in which the midpoint of its parameters falls. Every worker computes the
// same assignment from the model's configuration. A layer larger than a fragment's share
// can leave a fragment empty (it then has nothing to sync).
func layerFragments(c model.Config, F int) []int {
	costs := c.LayerCosts()
	var total int64
	for _, l := range costs {
		total += l.ParamBytes
	}
	out := make([]int, len(costs))
	var before int64
	for i, l := range costs {
		mid := float64(before) + float64(l.ParamBytes)/2
		out[i] = min(F-1, int(float64(F)*mid/float64(max(total, 1))))
		before += l.ParamBytes
	}
	return out
}

// fragmentOffset is the step of the outer period at which fragment f synchronises:
// ⌊f·H/F⌋, so fragment 0 keeps DiLoCo's steps (the multiples of H).
func fragmentOffset(f, H, F int) int { return f * H / F }

// fragmentInFlight reports whether, after step of a schedule of steps, some fragment of
// the model (frag: each layer's fragment) has been sent and its update not yet applied.
func (c SyncConfig) fragmentInFlight(step, steps int, frag []int) bool {
	if step >= steps || c.Overlap == 0 {
		return false
	}
	H, F := c.InnerSteps, c.fragments()
	for _, f := range frag {
		sent := step - mod(step-fragmentOffset(f, H, F), H)
		if sent >= 1 && sent+c.Overlap > step {
			return true
		}
	}
	return false
}

// splitByFragment cuts runs at fragment boundaries (frag: each layer's fragment), so that
// every run belongs to one fragment. Every holder of a layer cuts the same way, so groups
// still agree on the vectors they reduce.
func splitByFragment(runs []syncRun, frag []int) []syncRun {
	var out []syncRun
	for _, r := range runs {
		for l := r.first; l < r.last; l++ {
			if n := len(out); l > r.first && frag[l] == frag[out[n-1].first] {
				out[n-1].last = l + 1
				continue
			}
			out = append(out, syncRun{first: l, last: l + 1, group: r.group})
		}
	}
	return out
}

// streamingSync is Streaming DiLoCo (Douillard et al. 2025): DiLoCo's outer step per
// fragment of layers, the fragments' turns staggered across the InnerSteps, each
// fragment's all-reduce overlapped with Overlap inner steps and its update mixed with
// the local weights (MixLocal). It is DiLoCo with a schedule: the outer state and the
// outer step are dilocoSync's.
type streamingSync struct {
	*dilocoSync
	pending  []*pendingSync // fragments' all-reduces in flight
	fragment []int          // each layer's fragment
}

func newStreamingSync(b baseSync) *streamingSync {
	c := b.w.cfg
	return &streamingSync{dilocoSync: newDiLoCoSync(b), fragment: layerFragments(c.Train.Model, c.Sync.fragments())}
}

// consistent: no fragment of the model is in flight.
func (s *streamingSync) consistent() bool {
	w := s.w
	return !w.cfg.Sync.fragmentInFlight(w.step, w.cfg.Train.Steps, s.fragment)
}

// pendingSync is one run's all-reduce in flight: the pseudo-gradient sent at step sent,
// averaged in place by a goroutine, applied after step due.
type pendingSync struct {
	run       int
	sent, due int
	delta     []float32
	bytes     atomic.Int64
	rejected  []Rejection // what its collective dropped, reported when it is applied
	done      chan error
	cancel    context.CancelFunc
}

// sentCounter counts the payload bytes a background collective sends.
type sentCounter struct {
	Transport
	n *atomic.Int64
}

func (c sentCounter) PieceBytes() int { return pieceBytes(c.Transport) }

// Misbehaved passes a report of peer's misbehaviour to the wrapped transport.
func (c sentCounter) Misbehaved(peer, reason string) { misbehaved(c.Transport, peer, reason) }

// AlterContribution passes a contribution through the wrapped transport's alteration.
func (c sentCounter) AlterContribution(ctx context.Context, to string, f *frame.Frame) (*frame.Frame, error) {
	return alterContribution(ctx, c.Transport, to, f)
}

func (c sentCounter) Send(ctx context.Context, to string, f *frame.Frame) error {
	c.n.Add(int64(len(f.Payload)))
	return c.Transport.Send(ctx, to, f)
}

// launchSync starts the all-reduce of run i's pseudo-gradient. With an overlap it runs
// beside the next steps, so it must outlive ctx (the step's): it ends when it completes,
// when a failed step abandons it (streamingSync.abandon), or when a Recv runs into the stall
// timeout or a retired epoch.
func (s *streamingSync) launchSync(ctx context.Context, i int) *pendingSync {
	w := s.w
	p := &pendingSync{run: i, sent: w.step, due: w.step + w.cfg.Sync.Overlap, delta: s.pseudoGradient(i), done: make(chan error, 1)}
	if w.cfg.Sync.Overlap > 0 {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, p.cancel = context.WithCancel(ctx)
	q, ef, pol := w.outerQuorum(sentCounter{Transport: w.tr, n: &p.bytes}, w.runs[i]), w.feedback[i], w.policy()
	// Its rejections are the worker's at the step that applies it (finishSync), so that
	// the offender watch sees them with that synchronisation, whenever the goroutine ran.
	pol.reject = func(r Rejection) { p.rejected = append(p.rejected, r) }
	var at func() outerPoint
	if w.scorer != nil && len(w.runs[i].group.Members) >= 3 {
		// Scored as DiLoCo's outer step is, from the point every replica shares now: the
		// steps it runs beside move other fragments' anchors (and, in a pipelined
		// replica, the next launch's exchange the other stages' the scorer holds). With
		// two members nothing is scored, dropByScore: no copy of the anchors. A pipelined
		// launch without this step's exchange is unscored (canScore).
		at = s.frozen()
		pol.score, pol.length = s.outerScoreAt(i, at), s.outerLengthAt(i, at)
	}
	pol.sign = s.launchSigner(i, at)
	go func() {
		p.done <- q.reduce(ctx, p.delta, ef, pol)
	}()
	return p
}

// launchSigner is the signer of run i's gather launched now (nil without a node key),
// against the anchors every replica shares at this step: computed here, since the steps
// the gather runs beside move other fragments' anchors. Where every replica is one stage
// (every member of the group holds the whole model, cut into the same runs) it signs the
// digest of all the worker's anchors, in run order, and keeps evidence of them (at, the
// copy the score reads, or one taken here): the score reads every fragment's anchors, so
// a leader re-judging the gather needs them all, bound by every member's signature.
// Elsewhere it signs run i's anchor alone and keeps none.
func (s *streamingSync) launchSigner(i int, at func() outerPoint) *signer {
	w := s.w
	if w.signKey == nil {
		return nil
	}
	if !oneStagePlan(w.plan) {
		d := thetaDigest(s.outer[i].anchor)
		return &signer{key: w.signKey, theta: func() [thetaLen]byte { return d }}
	}
	if at == nil {
		at = s.frozen()
	}
	base := at().base
	d := thetaDigest(base...)
	return &signer{key: w.signKey, theta: func() [thetaLen]byte { return d },
		thetas: func() [][]float32 { return base }, keep: w.evidence.keep}
}

// oneStagePlan says every replica of p is one stage.
func oneStagePlan(p Plan) bool {
	for _, rep := range p.Replicas {
		if len(rep) != 1 {
			return false
		}
	}
	return true
}

// finishSync waits for p, or for ctx to end, and applies its averaged pseudo-gradient.
func (s *streamingSync) finishSync(ctx context.Context, p *pendingSync) error {
	w := s.w
	var err error
	done := false // the collective ended: its goroutine writes nothing more
	select {
	case err = <-p.done:
		done = true
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.cancel()
	w.syncSent += p.bytes.Load()
	if done && len(p.rejected) > 0 {
		w.rejectMu.Lock()
		w.rejected = append(w.rejected, p.rejected...)
		w.rejectMu.Unlock()
	}
	if err != nil {
		run := w.runs[p.run]
		return fmt.Errorf("step %d streaming sync of layers [%d, %d): %w", p.sent, run.first, run.last, err)
	}
	mix := float32(0)
	if w.cfg.Sync.Overlap > 0 {
		mix = float32(w.cfg.Sync.MixLocal)
	}
	s.applyOuter(p.run, p.delta, mix)
	return nil
}

// afterStep runs after step w.step: it applies the updates that are due, starts the
// synchronisation of the fragments whose turn it is and, after the last step, completes
// every fragment. It reports whether any fragment's update was applied.
func (s *streamingSync) afterStep(ctx context.Context) (bool, error) {
	w := s.w
	final := w.step == w.cfg.Train.Steps
	synced := false
	var kept []*pendingSync
	for _, p := range s.pending {
		if p.due > w.step && !final {
			kept = append(kept, p)
			continue
		}
		if err := s.finishSync(ctx, p); err != nil {
			return false, err
		}
		synced = true
	}
	s.pending = kept
	if final {
		return true, s.outerStep(ctx)
	}
	if err := s.launchAnchors(ctx); err != nil {
		return false, err
	}
	H, F := w.cfg.Sync.InnerSteps, w.cfg.Sync.fragments()
	for i, run := range w.runs {
		if w.step%H != fragmentOffset(s.fragment[run.first], H, F) {
			continue
		}
		// A launch alone synchronises nothing yet: the step that applies it does (and
		// reports what it dropped), so the offender watch counts one sync per outer step.
		p := s.launchSync(ctx, i)
		if w.cfg.Sync.Overlap > 0 {
			s.pending = append(s.pending, p)
		} else if err := s.finishSync(ctx, p); err != nil {
			return false, err
		} else {
			synced = true
		}
	}
	return synced, nil
}

// launchIndex is the frame index of the anchor exchange at a streaming launch (below
// mirrorIndex): its key carries the launch's step, as anchorIndex's the outer step's.
const launchIndex = 0xfffa

// launchAnchors runs the anchor exchange between the stages of a pipelined replica at a
// step where some fragment of the model launches, after the updates due at it are
// applied and before the launches: a fragment's score reads the whole model's anchors at
// its launch (this stage's, frozen, and the other stages' of the same step), as one-stage
// streaming's does. Every stage node of the replica takes part, whether or not its own
// layers launch then (the launching stage needs the others' anchors), and every replica
// reaches the step with the same anchors, so every honest member of a stage group scores
// from the same bits. It costs each stage node, per launch step (F per outer period),
// the model's parameters less its own stage's, as float32; nothing for a worker that
// does not score a pipelined replica (exchangeAnchorsAs).
func (s *streamingSync) launchAnchors(ctx context.Context) error {
	if !s.launchesAt(s.w.step) {
		return nil
	}
	return s.exchangeAnchorsAs(ctx, launchIndex)
}

// launchesAt says whether some fragment of the model (any layer's, not only this
// stage's) launches after step: what every stage node of a replica computes alike.
func (s *streamingSync) launchesAt(step int) bool {
	H, F := s.w.cfg.Sync.InnerSteps, s.w.cfg.Sync.fragments()
	for _, f := range s.fragment {
		if step%H == fragmentOffset(f, H, F) {
			return true
		}
	}
	return false
}

// abandon cancels the all-reduces in flight: after a failed step the worker is not
// consistent any more and will not apply them.
func (s *streamingSync) abandon() {
	for _, p := range s.pending {
		p.cancel()
	}
	s.pending = nil
}

// localSuffix names a replica's own weights of a parameter in a streaming checkpoint,
// whose model tensors are the global weights (the anchors, the same on every replica).
func localSuffix(replica int) string { return fmt.Sprintf(".streaming_local.r%d", replica) }

// snapshot makes st's model the global weights and adds the replica's own, and the
// outer momentum.
func (s *streamingSync) snapshot(st *StageState) {
	w := s.w
	for i, o := range s.outer {
		off := 0
		for _, p := range w.runParams[i] {
			st.Optimizer[p.Name+localSuffix(w.replica)] = st.Model[p.Name]
			g := p.Value.Clone()
			off += copy(g.Data, o.anchor[off:])
			st.Model[p.Name] = g
		}
	}
	s.dilocoSync.snapshot(st)
}

// restore is DiLoCo's, then sets the replica's own weights from a streaming checkpoint
// where it has them; the anchors stay the restored global weights. Without them (another
// plan's replica, a DiLoCo checkpoint) the replica starts from the global weights.
func (s *streamingSync) restore(weights, moments *model.TensorFile, step int) error {
	if err := s.dilocoSync.restore(weights, moments, step); err != nil {
		return err
	}
	s.pending = nil // (DiLoCo's restore reset anchorsFrom: the next launch exchanges again)
	w := s.w
	for _, ps := range w.runParams {
		for _, p := range ps {
			if t, ok := moments.Tensors[p.Name+localSuffix(w.replica)]; ok && t.SameShape(p.Value.Shape) {
				copy(p.Value.Data, t.Data)
			}
		}
	}
	return nil
}
