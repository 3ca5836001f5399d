package parallel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh/frame"
	"github.com/meshnode/meshnode/model"
)

// A joiner (rejoin.go) copies its stage's state from a live member of its group over the
// data plane, as torchft heals a replica from a healthy peer at a quorum boundary: the
// weights (DiLoCo's anchor: the same on every replica right after an outer step), the
// inner optimizer's moments and step count, the outer momentum (streaming: the fragments'
// anchors and momenta too), everything Worker.Snapshot takes and Worker.Restore restores;
// only the codecs' error-feedback residuals start at zero (another replica's residual is
// not the joiner's to send). The source takes the copy at its next consistent step (an
// outer-step boundary) and sends it in the background, so its training does not wait for
// the transfer.
//
// Frames, all of the group's job and of the epoch the workers were built for, index
// copyIndex:
//
//	request  scalar, step 0,       micro 0: u64 attempt (joiner → source; a random number)
//	header   scalar, step attempt, micro 0: u64 step, u64 weights bytes, u64 optimizer bytes
//	chunks   reduce, step attempt, micro i: bytes [i·copyChunk, …) of weights ‖ optimizer,
//	         safetensors both, each chunk exactly copyChunk bytes but the last
//
// The joiner checks the header against a bound derived from its own parameter count
// before it allocates anything, every chunk's length before it copies it, and the
// tensors' names and shapes before it restores them (Restore changes nothing otherwise).

// copyIndex is the frame index of a state copy's frames.
const copyIndex = 0xfffd

// copyChunk is the payload of a state copy's chunk frames but the last.
const copyChunk = 1 << 20

// copyHeaderSize is the payload of a state copy's header frame.
const copyHeaderSize = 24

// copyWait bounds how long a joiner waits for one source's copy before it asks the next:
// the source answers at its next outer-step boundary, once its control plane readmitted
// the joiner.
const copyWait = 60 * time.Second

// copyServeTimeout bounds one copy's sending by its source.
const copyServeTimeout = 2 * time.Minute

// CopyStats describe one state copy, from the joiner's or the source's side.
type CopyStats struct {
	Peer  string        // the source (joiner's side) or the joiner (source's side)
	Step  int           // the step of the state copied
	Bytes int64         // weights and optimizer state, safetensors-encoded
	Took  time.Duration // joiner: from the first request to the restored state; source: snapshot to last chunk sent
}

// copyRequest is a joiner's request a source serves at its next consistent step, or, for
// a ranged one (a rebuilt replica's stage, state_copy_range.go), at the first consistent
// step at or after a named one.
type copyRequest struct {
	to      string
	attempt uint64
	ranged  rangedRequest // zero for a whole-stage request
}

// copyQueue holds the requests waiting for a consistent step and what was served.
type copyQueue struct {
	mu      sync.Mutex
	pending []copyRequest
	served  []CopyStats
	// consistent is the last consistent step taken (due), 0 before the first.
	consistent int
	subs       []substitution // members to rename at the next consistent step (substitute.go)
}

func (q *copyQueue) push(r copyRequest) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(q.pending, r)
}

func (q *copyQueue) record(s CopyStats) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.served = append(q.served, s)
}

// CopiesServed lists the state copies this worker sent to joiners (each once its last
// chunk was sent).
func (w *Worker) CopiesServed() []CopyStats {
	w.copies.mu.Lock()
	defer w.copies.mu.Unlock()
	return append([]CopyStats(nil), w.copies.served...)
}

// rawTransport is the worker's transport without the stall bound.
func (w *Worker) rawTransport() Transport {
	if st, ok := w.tr.(stallTransport); ok {
		return st.Transport
	}
	return w.tr
}

func (w *Worker) copyKey(kind frame.Kind, step uint64, micro int) frame.Key {
	return frame.Key{Kind: kind, Job: w.cfg.Job, Epoch: w.cfg.Epoch, Step: uint32(step), Micro: uint16(micro), Index: copyIndex}
}

func (w *Worker) copyFrame(kind frame.Kind, step uint64, micro int, payload []byte) *frame.Frame {
	k := w.copyKey(kind, step, micro)
	return &frame.Frame{Kind: kind, DType: frame.DTypeU8, Job: k.Job, Epoch: k.Epoch, Step: k.Step, Micro: k.Micro,
		Index: k.Index, Shape: []int{len(payload)}, Payload: payload}
}

// listenForCopyRequests queues joiner id's copy requests until ctx ends or id is retired.
func (w *Worker) listenForCopyRequests(ctx context.Context, id string) {
	tr := w.rawTransport()
	for ctx.Err() == nil {
		rctx, cancel := w.peers.untilDropped(ctx, id)
		f, err := tr.Recv(rctx, id, w.copyKey(frame.KindScalar, 0, 0))
		cancel()
		if err != nil {
			return
		}
		r, err := parseCopyRequest(f.Payload)
		if err != nil {
			continue // not a request: nothing to answer
		}
		r.to = id
		w.copies.push(r)
	}
}

// serveCopies answers the queued copy requests at a consistent step: the snapshot is taken
// here, on the training goroutine; encoding and sending run in the background.
func (w *Worker) serveCopies(ctx context.Context) error {
	reqs := w.dueCopies(ctx)
	if len(reqs) == 0 {
		return nil
	}
	start := time.Now()
	snap, err := w.Snapshot()
	if err != nil {
		return fmt.Errorf("state copy for %s: %w", reqs[0].to, err)
	}
	names := w.layerParamNames()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), copyServeTimeout)
	go func() {
		defer cancel()
		enc := copyEncodings{}
		for _, r := range reqs {
			wb, ob, err := enc.of(snap, r.ranged, names)
			if err != nil {
				return
			}
			if err := w.sendCopy(ctx, r, snap.Step, wb, ob); err == nil {
				w.copies.record(CopyStats{Peer: r.to, Step: snap.Step, Bytes: int64(len(wb) + len(ob)), Took: time.Since(start)})
			}
		}
	}()
	return nil
}

// sendCopy sends one copy: the header, then the chunks.
func (w *Worker) sendCopy(ctx context.Context, r copyRequest, step int, weights, opt []byte) error {
	tr := w.rawTransport()
	h := binary.LittleEndian.AppendUint64(nil, uint64(step))
	h = binary.LittleEndian.AppendUint64(h, uint64(len(weights)))
	h = binary.LittleEndian.AppendUint64(h, uint64(len(opt)))
	if err := tr.Send(ctx, r.to, w.copyFrame(frame.KindScalar, r.attempt, 0, h)); err != nil {
		return err
	}
	all := append(append(make([]byte, 0, len(weights)+len(opt)), weights...), opt...)
	for i := 0; i*copyChunk < len(all); i++ {
		chunk := all[i*copyChunk : min((i+1)*copyChunk, len(all))]
		if err := tr.Send(ctx, r.to, w.copyFrame(frame.KindReduce, r.attempt, i, chunk)); err != nil {
			return err
		}
	}
	return nil
}

// copyHeader is a parsed state copy header.
type copyHeader struct {
	step            int
	weights, optim  int
	chunks, lastLen int
}

// errCopyHeader marks a copy header a joiner refuses.
var errCopyHeader = errors.New("state copy header refused")

// parseCopyHeader checks a copy header against the joiner's bound on the bytes it accepts
// and the job's last step, before anything is allocated.
func parseCopyHeader(p []byte, bound int64, maxStep int) (copyHeader, error) {
	if len(p) != copyHeaderSize {
		return copyHeader{}, fmt.Errorf("%w: %d bytes, want %d", errCopyHeader, len(p), copyHeaderSize)
	}
	step, wl, ol := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), binary.LittleEndian.Uint64(p[16:])
	if step > uint64(maxStep) {
		return copyHeader{}, fmt.Errorf("%w: step %d past the job's %d", errCopyHeader, step, maxStep)
	}
	if wl == 0 && ol == 0 {
		return copyHeader{}, fmt.Errorf("%w: the source refused the request at step %d (a step it had passed, or layers it does not hold)", errCopyHeader, step)
	}
	if wl == 0 || wl > uint64(bound) || ol > uint64(bound) || wl+ol > uint64(bound) {
		return copyHeader{}, fmt.Errorf("%w: %d + %d bytes, bound %d", errCopyHeader, wl, ol, bound)
	}
	total := int(wl + ol)
	h := copyHeader{step: int(step), weights: int(wl), optim: int(ol), chunks: (total + copyChunk - 1) / copyChunk}
	h.lastLen = total - (h.chunks-1)*copyChunk
	if h.chunks > 1<<16 {
		return copyHeader{}, fmt.Errorf("%w: %d chunks, at most %d", errCopyHeader, h.chunks, 1<<16)
	}
	return h, nil
}

// copyBound is the most bytes a joiner accepts for its stage's copy: weights, two inner
// moments, the outer momentum, streaming's anchors and a residual, each at most the
// stage's parameters in float32, and the safetensors headers.
func (w *Worker) copyBound() int64 {
	return 8*4*int64(countParams(w.params)) + 1<<20
}

// JoinFrom makes the worker a joiner of its running group: it copies the state of a live
// member (sources, tried in turn, each for up to copyWait) and restores it, and its outer
// steps then follow the quorum until it is admitted (rejoin.go). Call it before the
// worker's first step.
func (w *Worker) JoinFrom(ctx context.Context, sources []string) (CopyStats, error) {
	if len(sources) == 0 {
		return CopyStats{}, fmt.Errorf("join: no live member to copy the state from")
	}
	start := time.Now()
	var errs []error
	for _, src := range sources {
		// A fresh request number per request: answers to an earlier worker's requests on
		// this node (a join that was cut short) are never taken for this one's.
		attempt := uint64(rand.Uint32()|1) &^ (1 << 31) // the frames' step field; never 0
		st, err := w.copyFrom(ctx, src, attempt)
		if err == nil {
			st.Took = time.Since(start)
			w.peers.setJoiningSelf(true)
			return st, nil
		}
		if ctx.Err() != nil {
			return CopyStats{}, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("from %s: %w", src, err))
	}
	return CopyStats{}, fmt.Errorf("join: no state copy: %w", errors.Join(errs...))
}

// copyFrom asks src for its state and restores it.
func (w *Worker) copyFrom(ctx context.Context, src string, attempt uint64) (CopyStats, error) {
	return w.copyFromWith(ctx, src, attempt, binary.LittleEndian.AppendUint64(nil, attempt))
}

// copyFromWith sends src the request req (of number attempt) and restores the copy it
// answers with.
func (w *Worker) copyFromWith(ctx context.Context, src string, attempt uint64, req []byte) (CopyStats, error) {
	tr := w.rawTransport()
	ctx, cancel := context.WithTimeout(ctx, copyWait)
	defer cancel()
	if err := tr.Send(ctx, src, w.copyFrame(frame.KindScalar, 0, 0, req)); err != nil {
		return CopyStats{}, err
	}
	f, err := tr.Recv(ctx, src, w.copyKey(frame.KindScalar, attempt, 0))
	if err != nil {
		return CopyStats{}, err
	}
	h, err := parseCopyHeader(f.Payload, w.copyBound(), w.cfg.Train.Steps)
	if err != nil {
		return CopyStats{}, err
	}
	buf := make([]byte, 0, h.weights+h.optim)
	for i := range h.chunks {
		f, err := tr.Recv(ctx, src, w.copyKey(frame.KindReduce, attempt, i))
		if err != nil {
			return CopyStats{}, err
		}
		want := copyChunk
		if i == h.chunks-1 {
			want = h.lastLen
		}
		if len(f.Payload) != want {
			return CopyStats{}, fmt.Errorf("state copy chunk %d has %d bytes, want %d", i, len(f.Payload), want)
		}
		buf = append(buf, f.Payload...)
	}
	weights, moments, err := decodeStateCopy(buf, h.weights)
	if err != nil {
		return CopyStats{}, err
	}
	if err := w.Restore(weights, moments, h.step); err != nil {
		return CopyStats{}, fmt.Errorf("state copy of step %d: %w", h.step, err)
	}
	return CopyStats{Peer: src, Step: h.step, Bytes: int64(len(buf))}, nil
}

// decodeStateCopy splits a copy's bytes into its weights and optimizer files.
func decodeStateCopy(b []byte, weightsLen int) (*model.TensorFile, *model.TensorFile, error) {
	if weightsLen <= 0 || weightsLen > len(b) {
		return nil, nil, fmt.Errorf("state copy: weights of %d bytes in %d", weightsLen, len(b))
	}
	weights, err := model.DecodeSafetensors(b[:weightsLen])
	if err != nil {
		return nil, nil, fmt.Errorf("state copy weights: %w", err)
	}
	moments := &model.TensorFile{Tensors: map[string]*kernels.Tensor{}}
	if len(b) > weightsLen {
		if moments, err = model.DecodeSafetensors(b[weightsLen:]); err != nil {
			return nil, nil, fmt.Errorf("state copy optimizer: %w", err)
		}
	}
	return weights, moments, nil
}
