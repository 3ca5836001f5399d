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
// Streaming DiLoCo's stages run the same exchange at every step where a fragment launches
// (streamingSync.launchAnchors, frame index launchIndex), each launch scoring from the
// anchors of its own step.
//
// Frames: kind reduce, float32, index anchorIndex (streaming's launches: launchIndex),
// the outer step's (launch's) step number, micro the sending stage. A receiver checks the
// frame's dtype, codec and element count against the sending stage's parameter count
// (from the plan and its own copy of the model) before it decodes anything; a frame that
// does not match fails the outer step with an error naming the stage, as a malformed
// activation frame fails a step, and, being what no honest stage node sends, has its
// sender reported to the transport (MisbehaviourReporter: the data plane disconnects
// it). A frame of another step is only refused: the mailbox matches frames by step, so it
// is stale at worst, never malformed.

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
// theirs into the scorer at DiLoCo's outer step; nothing for a worker that does not score
// a pipelined replica.
func (s *dilocoSync) exchangeAnchors(ctx context.Context) error {
	return s.exchangeAnchorsAs(ctx, anchorIndex)
}

// exchangeAnchorsAs is the anchor exchange under frame index index: DiLoCo's outer step
// (anchorIndex) and a streaming launch (launchIndex) exchange the same anchors, at
// different points, under keys that cannot collide. It records the step it ran at
// (anchorsFrom, read by canScore); a failed one leaves none.
func (s *dilocoSync) exchangeAnchorsAs(ctx context.Context, index uint16) error {
	w := s.w
	if w.scorer == nil || w.numStages <= 1 {
		return nil
	}
	s.anchorsFrom = -1
	var own []float32
	for _, o := range s.outer {
		own = append(own, o.anchor...)
	}
	if err := w.exchangeStages(ctx, w.scorer, index, "anchors", own); err != nil {
		return err
	}
	s.anchorsFrom = w.step
	return nil
}

// exchangeStages sends own (this stage's runs' flat weights of one kind, in layer order)
// to every other stage node of the worker's replica under frame index index and the
// current step, and loads each other stage's into the scorer sc: the anchor exchange
// (DiLoCo) and the stage weight mirror (stage_mirror.go) share it. Every frame is
// bounded by its stage's parameter count before its bytes are kept and checked against
// it before anything is loaded; what names the exchange in errors.
func (w *Worker) exchangeStages(ctx context.Context, sc *heldOutScorer, index uint16, what string, own []float32) error {
	k := frame.Key{Kind: frame.KindReduce, Job: w.cfg.Job, Epoch: w.cfg.Epoch, Step: uint32(w.step), Micro: uint16(w.stage), Index: index}
	for p, peer := range w.stageGroup.Members {
		if p == w.stage {
			continue
		}
		f := &frame.Frame{Kind: k.Kind, DType: frame.DTypeF32, Codec: frame.CodecNone, Job: k.Job, Epoch: k.Epoch, Step: k.Step,
			Micro: k.Micro, Index: k.Index, Shape: []int{len(own)}, Payload: appendF32(nil, own)}
		if err := sendPieces(ctx, w.tr, peer, f); err != nil {
			return fmt.Errorf("step %d %s to stage %d (%s): %w", w.step, what, p, peer, err)
		}
		w.syncSent += int64(len(f.Payload))
	}
	for p, peer := range w.stageGroup.Members {
		if p == w.stage {
			continue
		}
		k.Micro = uint16(p)
		f, err := recvPieces(ctx, w.tr, peer, k, 4*sc.stageSize(p))
		if err == nil {
			err = sc.loadStage(p, w.step, f)
		}
		if err != nil {
			err = fmt.Errorf("step %d %s from stage %d (%s): %w", w.step, what, p, peer, err)
			if violation(err) { // a frame no honest stage node sends: disconnected too
				misbehaved(w.tr, peer, err.Error())
			}
			return err
		}
	}
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

// loadStage checks that f carries stage p's weights of step (float32, uncompressed,
// exactly its parameter count, the step's number) and loads them into the copy.
func (s *heldOutScorer) loadStage(p, step int, f *frame.Frame) error {
	n := s.stageSize(p)
	if n == 0 {
		return fmt.Errorf("stage %d holds no layers the scorer knows", p)
	}
	if f.Step != uint32(step) { // a stale frame, not a malformed one: its key names the step
		return fmt.Errorf("stage %d: a frame of step %d, want %d", p, f.Step, step)
	}
	if f.DType != frame.DTypeF32 || f.Codec != frame.CodecNone || f.Elements() != n || len(f.Payload) != 4*n {
		return fmt.Errorf("stage %d: %w: shape %v dtype %d codec %d, %d bytes, want %d float32", p, errMalformed, f.Shape, f.DType, f.Codec, len(f.Payload), n)
	}
	v := make([]float32, n)
	if err := decodeF32(v, f.Payload); err != nil {
		return fmt.Errorf("stage %d: %w", p, err)
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
		return fmt.Errorf("stage %d: %w", p, err)
	}
	return nil
}

// pipelinedScored says whether a replica cut into stages, one of replicas, scores its
// collectives under sc, and only where a gather can be scored (three replicas or more:
// with two, a score cannot tell which member lies, dropByScore), so that two pipelined
// replicas pay no exchange. DiLoCo's outer steps are scored from the anchors the stages
// exchange (above), streaming's fragments from the anchors the stages exchange at each
// launch (streamingSync.launchAnchors); every-step sync's and ZeRO's gradients from the
// other stages' weights the stage weight mirror brings (stage_mirror.go).
func pipelinedScored(sc SyncConfig, replicas int) bool {
	if replicas < 3 {
		return false
	}
	if sc.Zero > 0 {
		return true // ZeRO runs in sync mode whatever the mode says (newSyncStrategy)
	}
	return sc.Mode == jobspec.SyncDiLoCo || sc.Mode == jobspec.SyncStreaming || sc.Mode == jobspec.SyncEveryStep
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
