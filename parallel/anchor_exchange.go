package parallel

import (
	"context"
	"fmt"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// A replica cut into pipeline stages scores its DiLoCo outer steps as a one-stage replica
// does, on the whole model (issue 25): a stage node holds only its own layers, but the
// anchors (the weights every replica took at the last outer step) are the same on every
// replica, so the stages of one replica hand each other theirs. At the start of each
// outer step, before its gathers, every stage node sends its stage's anchors (its runs'
// flat anchors, in layer order) to every other stage node of its replica, and loads the
// anchors it receives into its scorer's copy of the whole model; the scorer then moves
// only its own run's part, exactly as a one-stage replica's does, so every honest member
// of a stage group computes the same scores to the bit. It costs each stage node the
// model's parameters less its own stage's, as float32, sent once per outer step.
//
// Frames: kind reduce, float32, index anchorIndex, the outer step's step number, micro
// the sending stage. A receiver checks the frame's dtype, codec and element count
// against the sending stage's parameter count (from the plan and its own copy of the
// model) before it decodes anything; a frame that does not match fails the outer step
// with an error naming the stage, as a malformed activation frame fails a step.

// anchorIndex is the frame index of the anchor exchange between the stages of a replica
// (below copyIndex, trafficIndex and normIndex; above any run's first layer and its
// retries' indices).
const anchorIndex = 0xfffc

// stageAnchors is the scorer's parameters of each stage of the worker's replica, nil for
// the worker's own stage: what the anchor exchange loads.
func stageAnchorParams(layers []model.Layer, plan Plan, replica, self int) [][]*model.Param {
	out := make([][]*model.Param, len(plan.Replicas[replica]))
	for p := range plan.Replicas[replica] {
		if p == self {
			continue
		}
		for _, run := range plan.syncRuns(replica, p) {
			out[p] = append(out[p], model.LayerParams(layers[run.first:run.last])...)
		}
	}
	return out
}

// exchangeAnchors sends this stage's anchors to the replica's other stages and loads
// theirs into the scorer; nothing for a worker that does not score a pipelined replica.
func (s *dilocoSync) exchangeAnchors(ctx context.Context) error {
	w := s.w
	if w.scorer == nil || w.numStages <= 1 {
		return nil
	}
	var own []float32
	for _, o := range s.outer {
		own = append(own, o.anchor...)
	}
	k := frame.Key{Kind: frame.KindReduce, Job: w.cfg.Job, Epoch: w.cfg.Epoch, Step: uint32(w.step), Micro: uint16(w.stage), Index: anchorIndex}
	for p, peer := range w.stageGroup.Members {
		if p == w.stage {
			continue
		}
		f := &frame.Frame{Kind: k.Kind, DType: frame.DTypeF32, Codec: frame.CodecNone, Job: k.Job, Epoch: k.Epoch, Step: k.Step,
			Micro: k.Micro, Index: k.Index, Shape: []int{len(own)}, Payload: appendF32(nil, own)}
		if err := sendPieces(ctx, w.tr, peer, f); err != nil {
			return fmt.Errorf("step %d anchors to stage %d (%s): %w", w.step, p, peer, err)
		}
		w.syncSent += int64(len(f.Payload))
	}
	for p, peer := range w.stageGroup.Members {
		if p == w.stage {
			continue
		}
		k.Micro = uint16(p)
		n := w.scorer.stageSize(p)
		f, err := recvPieces(ctx, w.tr, peer, k, 4*n)
		if err != nil {
			return fmt.Errorf("step %d anchors from stage %d (%s): %w", w.step, p, peer, err)
		}
		if err := w.scorer.loadStage(p, f); err != nil {
			return fmt.Errorf("step %d anchors from stage %d (%s): %w", w.step, p, peer, err)
		}
	}
	s.anchorsFrom = w.step
	return nil
}

// stageAnchors is each stage's anchors the copy holds (nil at own, the worker's stage):
// what a pipelined replica's scored outer step is scored from beside its own anchors.
func (s *heldOutScorer) stageAnchors(own int) [][]float32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]float32, len(s.stageParams))
	for p, ps := range s.stageParams {
		if p != own {
			out[p] = flattenValues(ps)
		}
	}
	return out
}

// modelAnchors is every stage's anchors in order, own's (the worker's runs') included:
// the whole model's anchors, whose digest a pipelined replica's scored contributions bind.
func (s *dilocoSync) modelAnchors() [][]float32 {
	out := s.w.scorer.stageAnchors(s.w.stage)
	var own []float32
	for _, o := range s.outer {
		own = append(own, o.anchor...)
	}
	out[s.w.stage] = own
	return out
}

// stageSize is how many parameters the anchors of stage p carry.
func (s *heldOutScorer) stageSize(p int) int {
	if p < 0 || p >= len(s.stageParams) {
		return 0
	}
	return countParams(s.stageParams[p])
}

// loadStage checks that f carries stage p's anchors (float32, uncompressed, exactly its
// parameter count) and loads them into the copy.
func (s *heldOutScorer) loadStage(p int, f *frame.Frame) error {
	n := s.stageSize(p)
	if n == 0 {
		return fmt.Errorf("anchors: stage %d holds no layers the scorer knows", p)
	}
	if f.DType != frame.DTypeF32 || f.Codec != frame.CodecNone || f.Elements() != n || len(f.Payload) != 4*n {
		return fmt.Errorf("anchors: shape %v dtype %d codec %d, %d bytes, want %d float32", f.Shape, f.DType, f.Codec, len(f.Payload), n)
	}
	v := make([]float32, n)
	if err := decodeF32(v, f.Payload); err != nil {
		return fmt.Errorf("anchors: %w", err)
	}
	return s.loadStageValues(p, v)
}

// loadStageValues loads v, stage p's flat anchors, into the copy: what the exchange
// received, or what evidence ships (VerifyEvidence).
func (s *heldOutScorer) loadStageValues(p int, v []float32) error {
	if n := s.stageSize(p); n == 0 || len(v) != n {
		return fmt.Errorf("anchors: %d values for stage %d, which holds %d", len(v), p, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := loadFlat(s.stageParams[p], v); err != nil {
		return fmt.Errorf("anchors: %w", err)
	}
	return nil
}

// pipelinedScored says whether a replica cut into stages, one of replicas, scores its
// collectives under sc: DiLoCo's outer steps only, whose anchors the stages exchange, and
// only where a gather can be scored (three replicas or more: with two, a score cannot
// tell which member lies, dropByScore), so that two pipelined replicas pay no exchange.
// Every-step sync, ZeRO and streaming would score from weights (or fragments' anchors)
// the other stages hold and do not send; their pipelined replicas stay unscored.
func pipelinedScored(sc SyncConfig, replicas int) bool {
	return sc.Mode == jobspec.SyncDiLoCo && sc.Zero == 0 && replicas >= 3
}

// canScore says whether this outer step is scored: the worker has a scorer and, in a
// pipelined replica, holds this step's anchors of every other stage. Without them (an
// exchange that did not happen this step) the step falls back, explicitly, to the
// unscored checks: scoring with another stage's stale anchors would give this member
// scores the group's other members do not compute.
func (s *dilocoSync) canScore() bool {
	w := s.w
	return w.scorer != nil && (w.numStages <= 1 || s.anchorsFrom == w.step)
}
