package parallel

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

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

// allReduceMean replaces x by the mean of every member's x. Uncompressed, it is a ring
// all-reduce (reduce-scatter, then all-gather of the reduced chunks), each peer sending
// 2·(R−1)/R of the vector. With ef, each member compresses its own vector once (with error
// feedback) and the compressed contributions travel the ring unchanged; every member
// decodes all R and sums them in member order. Either way every member ends with the same
// bits.
func allReduceMean(ctx context.Context, tr Transport, g Group, k roundKey, x []float32, ef *ErrorFeedback) error {
	R := len(g.Members)
	if R <= 1 {
		return nil
	}
	var err error
	if ef == nil || ef.codec.Name() == jobspec.CodecNone {
		err = ringAllReduce(ctx, tr, g, k, x)
	} else {
		err = ringAllGatherCompressed(ctx, tr, g, k, x, ef)
	}
	if err != nil {
		return err
	}
	inv := 1 / float32(R)
	for i := range x {
		x[i] *= inv
	}
	return nil
}

func chunkOf(x []float32, c, R int) []float32 {
	return x[len(x)*c/R : len(x)*(c+1)/R]
}

func mod(a, m int) int { return ((a % m) + m) % m }

func ringAllReduce(ctx context.Context, tr Transport, g Group, k roundKey, x []float32) error {
	R, me := len(g.Members), g.Self
	next, prev := g.Members[mod(me+1, R)], g.Members[mod(me-1, R)]
	recv := func(round int, dst []float32, add bool) error {
		f, err := tr.Recv(ctx, prev, k.frameKey(frame.KindReduce, round))
		if err != nil {
			return fmt.Errorf("all-reduce round %d: %w", round, err)
		}
		in := make([]float32, len(dst))
		if err := decodeF32(in, f.Payload); err != nil {
			return fmt.Errorf("all-reduce round %d from %s: %w", round, prev, err)
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
	// Reduce-scatter: after R−1 rounds member i holds the full sum of chunk i+1.
	for r := 0; r < R-1; r++ {
		out := chunkOf(x, mod(me-r, R), R)
		if err := tr.Send(ctx, next, k.frame(frame.KindReduce, r, frame.CodecNone, len(out), appendF32(nil, out))); err != nil {
			return err
		}
		if err := recv(r, chunkOf(x, mod(me-r-1, R), R), true); err != nil {
			return err
		}
	}
	// All-gather the reduced chunks.
	for r := 0; r < R-1; r++ {
		out := chunkOf(x, mod(me+1-r, R), R)
		round := R - 1 + r
		if err := tr.Send(ctx, next, k.frame(frame.KindReduce, round, frame.CodecNone, len(out), appendF32(nil, out))); err != nil {
			return err
		}
		if err := recv(round, chunkOf(x, mod(me-r, R), R), false); err != nil {
			return err
		}
	}
	return nil
}

func ringAllGatherCompressed(ctx context.Context, tr Transport, g Group, k roundKey, x []float32, ef *ErrorFeedback) error {
	R, me := len(g.Members), g.Self
	next, prev := g.Members[mod(me+1, R)], g.Members[mod(me-1, R)]
	payloads := make([][]byte, R)
	var own []float32
	payloads[me], own = ef.Encode(x)
	for r := 0; r < R-1; r++ {
		src := mod(me-r, R)
		if err := tr.Send(ctx, next, k.frame(frame.KindReduce, r, ef.codec.Wire(), len(x), payloads[src])); err != nil {
			return err
		}
		f, err := tr.Recv(ctx, prev, k.frameKey(frame.KindReduce, r))
		if err != nil {
			return fmt.Errorf("all-gather round %d: %w", r, err)
		}
		if f.Codec != ef.codec.Wire() {
			return fmt.Errorf("all-gather round %d from %s: codec %d, want %d", r, prev, f.Codec, ef.codec.Wire())
		}
		payloads[mod(me-r-1, R)] = f.Payload
	}
	clear(x)
	tmp := make([]float32, len(x))
	for m := 0; m < R; m++ {
		v := own
		if m != me {
			if err := ef.codec.Decode(tmp, payloads[m]); err != nil {
				return fmt.Errorf("all-gather: contribution of %s: %w", g.Members[m], err)
			}
			v = tmp
		}
		for i := range x {
			x[i] += v[i]
		}
	}
	return nil
}

// allGatherScalars sends v to every other member and returns every member's value in
// member order.
func allGatherScalars(ctx context.Context, tr Transport, g Group, k roundKey, v float64) ([]float64, error) {
	out := make([]float64, len(g.Members))
	out[g.Self] = v
	payload := binary.LittleEndian.AppendUint64(nil, math.Float64bits(v))
	for i, m := range g.Members {
		if i == g.Self {
			continue
		}
		f := &frame.Frame{Kind: frame.KindScalar, DType: frame.DTypeU8, Job: k.job, Epoch: k.epoch, Step: k.step,
			Micro: uint16(g.Self), Index: k.index, Shape: []int{8}, Payload: payload}
		if err := tr.Send(ctx, m, f); err != nil {
			return nil, err
		}
	}
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
