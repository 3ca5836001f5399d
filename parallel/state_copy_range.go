package parallel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// A replica of several pipeline stages that lost a stage is rebuilt in place from a live
// replica that cuts those layers the same way (docs/engine.md, "A lost pipeline stage").
// Every stage of the rebuilt replica is a new worker, the lost stage's and the ones whose
// nodes survived alike (their inner state is at the step where the pipeline broke, behind
// the survivors by outer steps it missed), and each copies its layers from the matching
// stage of one live replica: weights, inner and outer optimizer state, as a joiner does
// (state_copy.go). They must all copy at the same step, or their pipeline would meet at
// different steps; the source's stages run in lock step (every stage joins each step's
// gradient-norm exchange), but the requests reach them at different moments, so the step
// is named instead of being "the next":
//
//  1. the rebuilt replica's first stage asks its source for its step: a query, answered at
//     the source's next consistent step s with a header of no bytes;
//  2. it tells the replica's other stages N = s+H (H the inner steps of an outer period),
//     and every stage asks its source for its layers at the first consistent step at or
//     after N. That is the same step T on every source, since a step's consistency
//     depends on its number alone (DiLoCo: a multiple of H or the last step; streaming: no
//     fragment in flight, the same steps for every fragment holder);
//  3. a source serves a ranged request at T, or refuses it (a header of no bytes) when it
//     took a consistent step at or after N before the request reached it. The request had
//     an outer period's steps (from s to N) to arrive; a refused stage's rebuild fails,
//     and the control plane drops the replica again: nothing forks.
//
// A ranged request is the payload of the request frame (an 8-byte one asks for the whole
// stage at the next consistent step):
//
//	u64 attempt (not 0), u64 after, u32 first layer, u32 last layer (exclusive)
//
// first == last is the query. A source serves only layers of its own stage, and only the
// tensors of their parameters (weights, moments, outer state: every name "<param>" or
// "<param>.<suffix>"), so a source may hold more layers than the joiner.

// rangedRequestSize is the payload of a ranged request.
const rangedRequestSize = 24

// rebuildStepMicro numbers the frame in which a rebuilt replica's first stage tells its
// other stages the step to copy at (index copyIndex, step 0; micro 0 is the requests').
const rebuildStepMicro = 1

// rangedRequest is a ranged request's part beyond its attempt; ok is false for a
// whole-stage request.
type rangedRequest struct {
	ok          bool
	after       int // serve at the first consistent step ≥ after (0: the next)
	first, last int // the layers [first, last); first == last: a query
}

func (r rangedRequest) query() bool { return r.ok && r.first == r.last }

// parseCopyRequest parses a request frame's payload: 8 bytes (the whole stage) or a
// ranged request, whose step and layers are bounded before anything uses them.
func parseCopyRequest(p []byte) (copyRequest, error) {
	switch len(p) {
	case 8:
		return copyRequest{attempt: binary.LittleEndian.Uint64(p)}, nil
	case rangedRequestSize:
	default:
		return copyRequest{}, fmt.Errorf("state copy request of %d bytes", len(p))
	}
	attempt, after := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:])
	first, last := binary.LittleEndian.Uint32(p[16:]), binary.LittleEndian.Uint32(p[20:])
	switch {
	case attempt == 0:
		return copyRequest{}, errors.New("state copy request: attempt 0")
	case after > math.MaxInt32:
		return copyRequest{}, fmt.Errorf("state copy request: step %d", after)
	case first > last || last > math.MaxInt32:
		return copyRequest{}, fmt.Errorf("state copy request: layers [%d, %d)", first, last)
	}
	return copyRequest{attempt: attempt, ranged: rangedRequest{ok: true, after: int(after), first: int(first), last: int(last)}}, nil
}

// appendRanged encodes r's ranged request.
func (r copyRequest) appendRanged(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.attempt)
	b = binary.LittleEndian.AppendUint64(b, uint64(r.ranged.after))
	b = binary.LittleEndian.AppendUint32(b, uint32(r.ranged.first))
	return binary.LittleEndian.AppendUint32(b, uint32(r.ranged.last))
}

// due records step as the latest consistent step and takes the requests due at it (those
// asking for a step at or before it), with the consistent step taken before this one.
func (q *copyQueue) due(step int) (reqs []copyRequest, prev int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	prev, q.consistent = q.consistent, step
	keep := q.pending[:0:0]
	for _, r := range q.pending {
		if r.ranged.after <= step {
			reqs = append(reqs, r)
		} else {
			keep = append(keep, r)
		}
	}
	q.pending = keep
	return reqs, prev
}

// dueCopies applies the pending substitutions (substitute.go), takes the requests due at
// this consistent step, answers the queries and the ranged requests it refuses (in the
// background: a header of no bytes), and returns those that need the state.
func (w *Worker) dueCopies(ctx context.Context) []copyRequest {
	w.applySubstitutions()
	reqs, prev := w.copies.due(w.step)
	first, last := w.LayerRange()
	var out []copyRequest
	for _, r := range reqs {
		rr := r.ranged
		switch {
		case !rr.ok:
			out = append(out, r)
		case rr.query(),
			rr.after > 0 && prev >= rr.after,   // the step asked for has passed
			rr.first < first || rr.last > last: // not this stage's layers
			go w.sendEmptyHeader(ctx, r, w.step)
		default:
			out = append(out, r)
		}
	}
	return out
}

// sendEmptyHeader answers a query (or refuses a request) with a header of no bytes at
// the consistent step step.
func (w *Worker) sendEmptyHeader(ctx context.Context, r copyRequest, step int) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), copyServeTimeout)
	defer cancel()
	w.sendCopy(ctx, r, step, nil, nil) //nolint:errcheck // the joiner times out and fails
}

// layerParamNames lists, by layer index, the names of the stage's parameters.
func (w *Worker) layerParamNames() map[int][]string {
	first, _ := w.LayerRange()
	out := map[int][]string{}
	for i, l := range w.state.Layers() {
		for _, p := range l.Params() {
			out[first+i] = append(out[first+i], p.Name)
		}
	}
	return out
}

// copyEncodings caches the encoded copies of one snapshot, by layer range ({-1, -1}: the
// whole stage).
type copyEncodings map[[2]int][2][]byte

// of returns the weights and optimizer files of r's layers of snap.
func (e copyEncodings) of(snap StageState, r rangedRequest, names map[int][]string) ([]byte, []byte, error) {
	key := [2]int{-1, -1}
	weights, opt := snap.Model, snap.Optimizer
	if r.ok {
		key = [2]int{r.first, r.last}
		var keep []string
		for l := r.first; l < r.last; l++ {
			keep = append(keep, names[l]...)
		}
		weights, opt = tensorsOf(snap.Model, keep), tensorsOf(snap.Optimizer, keep)
	}
	if c, ok := e[key]; ok {
		return c[0], c[1], nil
	}
	var wb, ob bytes.Buffer
	if err := model.EncodeSafetensors(&wb, weights, nil); err != nil {
		return nil, nil, err
	}
	if err := model.EncodeSafetensors(&ob, opt, snap.OptimizerMeta); err != nil {
		return nil, nil, err
	}
	e[key] = [2][]byte{wb.Bytes(), ob.Bytes()}
	return wb.Bytes(), ob.Bytes(), nil
}

// tensorsOf is the tensors of ts named one of params or "<param>.<suffix>".
func tensorsOf(ts map[string]*kernels.Tensor, params []string) map[string]*kernels.Tensor {
	out := map[string]*kernels.Tensor{}
	for name, t := range ts {
		for _, p := range params {
			if name == p || strings.HasPrefix(name, p+".") {
				out[name] = t
				break
			}
		}
	}
	return out
}

// RebuildFrom makes the worker a stage of a rebuilt replica: every stage of the replica is
// a new worker that calls RebuildFrom, each with a live node of another replica whose
// stage holds its layers (source). It copies its layers' weights and optimizer state from
// source at the step the replica's first stage chose (above), restores them, and then
// follows the group's outer steps until the quorum admits it, as JoinFrom's joiner does.
// Call it before the worker's first step.
func (w *Worker) RebuildFrom(ctx context.Context, source string) (CopyStats, error) {
	start := time.Now()
	after, err := w.rebuildStep(ctx, source)
	if err != nil {
		return CopyStats{}, fmt.Errorf("rebuild from %s: %w", source, err)
	}
	first, last := w.LayerRange()
	r := copyRequest{attempt: newCopyAttempt(), ranged: rangedRequest{ok: true, after: after, first: first, last: last}}
	st, err := w.copyFromWith(ctx, source, r.attempt, r.appendRanged(nil))
	if err != nil {
		return CopyStats{}, fmt.Errorf("rebuild from %s: %w", source, err)
	}
	if st.Step < after {
		return CopyStats{}, fmt.Errorf("rebuild from %s: it sent step %d, asked for one at or after %d", source, st.Step, after)
	}
	st.Took = time.Since(start)
	w.peers.setJoiningSelf(true)
	return st, nil
}

// newCopyAttempt is a fresh request number: the frames' step field, never 0.
func newCopyAttempt() uint64 { return uint64(rand.Uint32()|1) &^ (1 << 31) }

// rebuildStep is the step the rebuilt replica's stages copy at or after: the replica's
// first stage asks its source and tells the others; they wait for it.
func (w *Worker) rebuildStep(ctx context.Context, source string) (int, error) {
	tr := w.rawTransport()
	stages := w.plan.Replicas[w.replica]
	if w.stage != 0 {
		ctx, cancel := context.WithTimeout(ctx, 2*copyWait)
		defer cancel()
		f, err := tr.Recv(ctx, stages[0].Node, w.copyKey(frame.KindScalar, 0, rebuildStepMicro))
		if err != nil {
			return 0, fmt.Errorf("the step from the replica's first stage %s: %w", stages[0].Node, err)
		}
		if len(f.Payload) != 8 || binary.LittleEndian.Uint64(f.Payload) > uint64(w.cfg.Train.Steps) {
			return 0, fmt.Errorf("the step from the replica's first stage %s: %d bytes", stages[0].Node, len(f.Payload))
		}
		return int(binary.LittleEndian.Uint64(f.Payload)), nil
	}
	// Two queries measure how many outer periods a round trip to the source takes: the
	// step named must still be ahead of every source when the stages' requests reach them
	// (rebuildLead). It stays within the job: a step past its end is never consistent.
	s1, err := w.queryStep(ctx, source)
	if err != nil {
		return 0, err
	}
	s, err := w.queryStep(ctx, source)
	if err != nil {
		return 0, err
	}
	h := max(w.cfg.Sync.InnerSteps, 1)
	after := s + rebuildLead(h, s-s1)
	if last := w.cfg.Train.Steps / h * h; after > last {
		after = max(last, s+h)
	}
	for _, st := range stages[1:] {
		f := w.copyFrame(frame.KindScalar, 0, rebuildStepMicro, binary.LittleEndian.AppendUint64(nil, uint64(after)))
		if err := tr.Send(ctx, st.Node, f); err != nil {
			return 0, fmt.Errorf("tell stage %s the step: %w", st.Node, err)
		}
	}
	return after, nil
}

// queryStep asks source for its next consistent step.
func (w *Worker) queryStep(ctx context.Context, source string) (int, error) {
	tr := w.rawTransport()
	ctx, cancel := context.WithTimeout(ctx, copyWait)
	defer cancel()
	r := copyRequest{attempt: newCopyAttempt(), ranged: rangedRequest{ok: true}}
	if err := tr.Send(ctx, source, w.copyFrame(frame.KindScalar, 0, 0, r.appendRanged(nil))); err != nil {
		return 0, err
	}
	f, err := tr.Recv(ctx, source, w.copyKey(frame.KindScalar, r.attempt, 0))
	if err != nil {
		return 0, fmt.Errorf("its step: %w", err)
	}
	return parseStepAnswer(f.Payload, w.cfg.Train.Steps)
}

// parseStepAnswer parses a query's answer: a copy header of no bytes.
func parseStepAnswer(p []byte, maxStep int) (int, error) {
	if len(p) != copyHeaderSize {
		return 0, fmt.Errorf("%w: %d bytes, want %d", errCopyHeader, len(p), copyHeaderSize)
	}
	step := binary.LittleEndian.Uint64(p)
	if step > uint64(maxStep) || binary.LittleEndian.Uint64(p[8:]) != 0 || binary.LittleEndian.Uint64(p[16:]) != 0 {
		return 0, fmt.Errorf("%w: not an answer to a step query", errCopyHeader)
	}
	return int(step), nil
}

// rebuildLead is how many steps after the source's consistent step s the rebuilt
// replica's stages copy: whole outer periods of h steps (in DiLoCo the step must be a
// boundary; in streaming, whose consistent steps may follow each other, a multiple of H is
// as good). A source answers a step query only at a consistent step, so the second of two
// queries, sent as the first's answer came, comes back k = advanced/h periods later: a
// round trip took less than k periods. The stages' requests need about one and a half
// round trips more to reach their sources (the answer's way back, the step told to the
// other stages, their requests), so the step named is 2k periods on (at least two).
// One period was the lead before: on a loaded machine (5 steps at 50 steps/s, 0.1 s,
// less than a round trip there) the sources passed it before the requests came and
// refused the copy (TestKilledStageIsRebuiltFromALivePeer).
func rebuildLead(h, advanced int) int {
	k := (max(advanced, 0) + h - 1) / h
	return max(2, 2*k) * h
}
