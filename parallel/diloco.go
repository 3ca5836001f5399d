package parallel

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/model"
)

// dilocoSync is DiLoCo (Douillard et al. 2023): replicas take InnerSteps local AdamW
// steps, then an outer step averages their pseudo-gradients (anchor − θ, compressed with
// error feedback where a codec is set) and applies Nesterov momentum to the anchor, which
// every replica then takes as its weights. Across one replica it is never chosen: the
// outer step would only turn the optimizer into a lookahead one, and a split model must
// train like one process.
type dilocoSync struct {
	baseSync
	outer []*outerRun // per run
	// anchorsFrom is the step of the last anchor exchange between the stages of a
	// pipelined replica (anchor_exchange.go), -1 before the first: its outer steps are
	// scored only when the scorer holds this step's anchors of every stage.
	anchorsFrom int
	// anchorStep is the step the anchors were taken at: the last outer step, the step
	// restored from (a checkpoint may be of any step between two outer steps: a one-node
	// or pipelined epoch's), 0 at the start. The next outer step's contributions are the
	// work of the inner steps after it, which is what an audit recomputes; signatures bind
	// it (anchorDigest).
	anchorStep int
}

// outerRun is DiLoCo's state for one run of layers: the parameters at the last
// synchronisation and the outer Nesterov momentum.
type outerRun struct {
	anchor   []float32
	momentum []float32
}

func newOuterRun(ps []*model.Param) *outerRun {
	o := &outerRun{momentum: make([]float32, countParams(ps))}
	for _, p := range ps {
		o.anchor = append(o.anchor, p.Value.Data...)
	}
	return o
}

func newDiLoCoSync(b baseSync) *dilocoSync {
	s := &dilocoSync{baseSync: b, anchorsFrom: -1}
	for _, ps := range b.w.runParams {
		s.outer = append(s.outer, newOuterRun(ps))
	}
	return s
}

// afterStep runs the outer step every InnerSteps steps and at the last step.
func (s *dilocoSync) afterStep(ctx context.Context) (bool, error) {
	w := s.w
	if w.step%w.cfg.Sync.InnerSteps != 0 && w.step != w.cfg.Train.Steps {
		return false, nil
	}
	return true, timed(&w.times.Sync, func() error { return s.outerStep(ctx) })
}

// consistent: the replicas agree right after an outer step.
func (s *dilocoSync) consistent() bool {
	w := s.w
	return w.step%w.cfg.Sync.InnerSteps == 0 || w.step == w.cfg.Train.Steps
}

// snapshot adds the outer Nesterov momentum, "<name>.outer_momentum" (the same on every
// replica: each applies the same averaged pseudo-gradient).
func (s *dilocoSync) snapshot(st *StageState) {
	for i, o := range s.outer {
		off := 0
		for _, p := range s.w.runParams[i] {
			t := kernels.NewTensor(p.Value.Shape...)
			off += copy(t.Data, o.momentum[off:])
			st.Optimizer[p.Name+outerMomentumSuffix] = t
		}
	}
}

// restore restores the training state; the anchor becomes the restored weights and the
// outer momentum is restored where the checkpoint has it (zero otherwise, as for a
// checkpoint of a sync-mode run).
func (s *dilocoSync) restore(weights, moments *model.TensorFile, step int) error {
	if err := s.baseSync.restore(weights, moments, step); err != nil {
		return err
	}
	s.restoreOuter(moments)
	s.anchorsFrom = -1 // the next outer step exchanges the stages' anchors again; none before it is scored
	s.anchorStep = step
	if s.w.audits() {
		// Audited: the next outer step's inner steps start from zero moments, as its
		// recomputation does, whatever the checkpoint's epoch ran (an unaudited epoch's
		// moments are not zero after its outer steps).
		return s.w.resetInnerMoments()
	}
	return nil
}

func (s *dilocoSync) restoreOuter(moments *model.TensorFile) {
	for i, ps := range s.w.runParams {
		s.outer[i] = newOuterRun(ps)
		off := 0
		for _, p := range ps {
			if t, ok := moments.Tensors[p.Name+outerMomentumSuffix]; ok && t.SameShape(p.Value.Shape) {
				copy(s.outer[i].momentum[off:], t.Data)
			}
			off += p.Value.Size()
		}
	}
}

// outerStep is DiLoCo's outer step for every run: Δ = anchor − θ averaged across the
// replicas (compressed with error feedback), then Nesterov as torch.optim.SGD does it:
// u ← μ·u + Δ; anchor ← anchor − lr·(Δ + μ·u); θ ← anchor. In an audited job the inner
// AdamW then starts again from zero moments (audit.go).
func (s *dilocoSync) outerStep(ctx context.Context) error {
	w := s.w
	if err := s.exchangeAnchors(ctx); err != nil {
		return err
	}
	for i, run := range w.runs {
		delta := s.pseudoGradient(i)
		pol := s.gatherPolicy(i)
		if err := w.outerQuorum(countingTransport{w}, run).reduce(ctx, delta, w.feedback[i], pol); err != nil {
			return fmt.Errorf("step %d outer sync of layers [%d, %d): %w", w.step, run.first, run.last, err)
		}
		s.applyOuter(i, delta, 0)
	}
	s.anchorStep = w.step
	if w.audits() {
		// Audited: the next inner steps start from zero moments, as a recomputation does.
		return w.resetInnerMoments()
	}
	return nil
}

// pseudoGradient is run i's Δ = anchor − θ, weighed by the replica's batch share.
func (s *dilocoSync) pseudoGradient(i int) []float32 {
	o := s.outer[i]
	delta := make([]float32, len(o.anchor))
	off := 0
	for _, p := range s.w.runParams[i] {
		for j, v := range p.Value.Data {
			delta[off+j] = o.anchor[off+j] - v
		}
		off += p.Value.Size()
	}
	s.w.weigh(delta)
	return delta
}

// applyOuter applies run i's averaged pseudo-gradient: the Nesterov step moves the
// anchor, and the parameters become mix·θ + (1−mix)·anchor (the anchor when mix is 0).
func (s *dilocoSync) applyOuter(i int, delta []float32, mix float32) {
	o, sc := s.outer[i], s.w.cfg.Sync
	nesterovStep(o.anchor, o.momentum, delta, float32(sc.OuterLR), float32(sc.OuterMomentum))
	off := 0
	for _, p := range s.w.runParams[i] {
		if mix == 0 {
			off += copy(p.Value.Data, o.anchor[off:])
			continue
		}
		for j, v := range p.Value.Data {
			p.Value.Data[j] = mix*v + (1-mix)*o.anchor[off+j]
		}
		off += p.Value.Size()
	}
}

// nesterovStep is one step of torch.optim.SGD(lr, momentum=mu, nesterov=True, dampening=0)
// on params with gradient g and momentum buffer u (zero before the first step, where torch's
// u ← g is the same): u ← mu·u + g; params ← params − lr·(g + mu·u).
func nesterovStep(params, u, g []float32, lr, mu float32) {
	for j, d := range g {
		u[j] = mu*u[j] + d
		params[j] -= lr * (d + mu*u[j])
	}
}
