package parallel

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// runCollective runs one collective on every member of a fresh in-memory network whose
// frames are bounded by maxPayload (0: unbounded) and returns each member's result and the
// reduce frames sent.
func runCollective(t *testing.T, maxPayload int, in [][]float32, codec jobspec.Codec,
	run func(tr Transport, g Group, x []float32, ef *ErrorFeedback) error) ([][]float32, int64) {
	t.Helper()
	R := len(in)
	names := make([]string, R)
	for m := range R {
		names[m] = fmt.Sprintf("m%d", m)
	}
	net := NewInMemory(names...)
	defer net.Close()
	net.SetMaxPayload(maxPayload)
	out := make([][]float32, R)
	var wg sync.WaitGroup
	for m := range R {
		out[m] = slices.Clone(in[m])
		var ef *ErrorFeedback
		if codec != jobspec.CodecNone {
			c, err := NewCodec(codec, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			ef = NewErrorFeedback(c, len(in[m]))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(net.Peer(names[m]), Group{Members: names, Self: m}, out[m], ef); err != nil {
				t.Errorf("member %d: %v", m, err)
			}
		}()
	}
	wg.Wait()
	return out, net.SentFrames(frame.KindReduce)
}

// TestCollectivesInPiecesKeepTheBits: over a network that refuses frames past 256 bytes,
// the gathered all-reduce (raw and with each codec) and the ring cut every message into
// pieces and end with the bits they give over an unbounded network, where each message
// is one frame. Lengths cover a message that is an exact multiple of the piece size (it
// ends with an empty piece) and one that is not.
func TestCollectivesInPiecesKeepTheBits(t *testing.T) {
	const R, piece = 3, 256
	gather := func(tr Transport, g Group, x []float32, ef *ErrorFeedback) error {
		return allReduceMean(context.Background(), tr, g, roundKey{job: 1}, x, ef, policy{rule: jobspec.AggregateMean})
	}
	ring := func(tr Transport, g Group, x []float32, _ *ErrorFeedback) error {
		return ringAllReduce(context.Background(), tr, g, roundKey{job: 1}, x)
	}
	cases := []struct {
		name  string
		n     int
		codec jobspec.Codec
		run   func(Transport, Group, []float32, *ErrorFeedback) error
	}{
		{"gather/none", 1001, jobspec.CodecNone, gather},
		{"gather/none/exact", 1024, jobspec.CodecNone, gather},
		{"gather/fp16", 1001, jobspec.CodecFP16, gather},
		{"gather/int8", 1001, jobspec.CodecInt8, gather},
		{"gather/topk", 1001, jobspec.CodecTopK, gather},
		{"ring", 3 * 1024, jobspec.CodecNone, ring},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range cases {
		in := make([][]float32, R)
		for m := range in {
			in[m] = make([]float32, c.n)
			for i := range in[m] {
				in[m][i] = float32(rng.NormFloat64())
			}
		}
		whole, frames := runCollective(t, 0, in, c.codec, c.run)
		cut, pieces := runCollective(t, piece, in, c.codec, c.run)
		for m := range R {
			if !slices.Equal(whole[m], cut[m]) {
				t.Errorf("%s: member %d's result in %d-byte pieces differs from the whole messages'", c.name, m, piece)
			}
		}
		if pieces-frames < 2*R*(R-1) { // each member's message to each other member: ≥ 3 pieces
			t.Errorf("%s: %d frames in pieces, %d whole: the messages were not cut", c.name, pieces, frames)
		}
	}
}

// sized gives a transport a piece size, as the receiving side of a test.
type sized struct {
	Transport
	n int
}

func (s sized) PieceBytes() int { return s.n }

// TestRecvPiecesRefusesBadMessages: a message longer than what its elements may take (one
// frame, or pieces without end), a piece longer than the piece size and pieces that
// change header are refused with errPieces, after reading no piece past the bound; a
// well-formed message is whole.
func TestRecvPiecesRefusesBadMessages(t *testing.T) {
	const size, maxLen = 16, 64
	key := frame.Key{Kind: frame.KindReduce, Job: 1}
	piece := func(n int, codec frame.Codec) *frame.Frame {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i)
		}
		return &frame.Frame{Kind: frame.KindReduce, DType: frame.DTypeF32, Codec: codec, Job: 1, Shape: []int{16}, Payload: p}
	}
	cases := []struct {
		name   string
		pieces []int // payload lengths; -n: length n with another codec
		ok     bool
		read   int // pieces the receiver may read at most
	}{
		{"one short frame", []int{12}, true, 1},
		{"pieces", []int{16, 16, 5}, true, 3},
		{"exact with empty end", []int{16, 16, 16, 16, 0}, true, 5},
		{"one frame over the bound", []int{size + 1}, false, 1},
		{"short frame but past maxLen", []int{16, 16, 16, 16, 1}, false, 5},
		{"pieces without end", slices.Repeat([]int{16}, 1000), false, maxLen/size + 1},
		{"header changes", []int{16, -16, 4}, false, 2},
	}
	for _, c := range cases {
		net := NewInMemory("a", "b")
		for _, n := range c.pieces {
			f := piece(max(n, -n), frame.CodecNone)
			if n < 0 {
				f.Codec = frame.CodecInt8
			}
			if err := net.Peer("a").Send(context.Background(), "b", f); err != nil {
				t.Fatal(err)
			}
		}
		// Every piece is already there: a receiver that waits for more fails at once.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		f, err := recvPieces(ctx, sized{net.Peer("b"), size}, "a", key, maxLen)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.ok && !errors.Is(err, errPieces):
			t.Errorf("%s: got %v, want errPieces", c.name, err)
		case c.ok && len(f.Payload) != total(c.pieces):
			t.Errorf("%s: %d bytes, want %d", c.name, len(f.Payload), total(c.pieces))
		}
		// What is left unread under the key: the receiver stopped within the bound.
		left := 0
		for {
			if _, err := net.Peer("b").Recv(ctx, "a", key); err != nil {
				break
			}
			left++
		}
		if read := len(c.pieces) - left; read > c.read {
			t.Errorf("%s: read %d pieces, at most %d may be read", c.name, read, c.read)
		}
		net.Close()
	}
}

func total(lengths []int) int {
	n := 0
	for _, l := range lengths {
		n += max(l, -l)
	}
	return n
}

// FuzzRecvPieces: whatever pieces a peer sends, recvPieces returns at most maxLen bytes
// (exactly what was sent, when it accepts), refuses with errPieces otherwise, and never
// reads more pieces than the bound allows.
func FuzzRecvPieces(f *testing.F) {
	f.Add([]byte{16, 16, 3})
	f.Add([]byte{16, 16, 16, 16, 0})
	f.Add([]byte{17})
	f.Add(slices.Repeat([]byte{16}, 40))
	f.Fuzz(func(t *testing.T, lengths []byte) {
		const size, maxLen = 16, 64
		if len(lengths) == 0 || len(lengths) > 200 {
			return
		}
		net := NewInMemory("a", "b")
		defer net.Close()
		key := frame.Key{Kind: frame.KindReduce, Job: 1}
		var sent []byte
		for i, n := range lengths {
			p := make([]byte, n)
			if n > 0 {
				p[0] = byte(i)
			}
			sent = append(sent, p...)
			fr := &frame.Frame{Kind: frame.KindReduce, DType: frame.DTypeF32, Job: 1, Shape: []int{16}, Payload: p}
			if err := net.Peer("a").Send(context.Background(), "b", fr); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // every piece is already there: a receiver that waits for more fails
		got, err := recvPieces(ctx, sized{net.Peer("b"), size}, "a", key, maxLen)
		if err != nil {
			return
		}
		if len(got.Payload) > maxLen || !slices.Equal(got.Payload, sent[:len(got.Payload)]) {
			t.Fatalf("accepted %d bytes that are not what was sent", len(got.Payload))
		}
	})
}

// TestTrainingInPiecesKeepsTheBits: ZeRO-1 on 3 replicas (the ring's reduce-scatter, the
// parameter all-gather) and every-step sync with a robust rule (the gathered all-reduce)
// train over a network that refuses frames past 16 KiB (a micro-batch's activations fit), far below each stage's parameters,
// with the losses of an unbounded network bit for bit.
func TestTrainingInPiecesKeepsTheBits(t *testing.T) {
	cfg := pipelineConfig(3)
	cfg.Train.Batch = 12
	L := cfg.Train.Model.NumLayers()
	zero, robust := cfg, cfg
	zero.Sync.Zero = 1
	robust.Sync.Aggregate = jobspec.AggregateMedian
	for name, c := range map[string]JobConfig{"zero-1": zero, "median": robust} {
		want, _ := runLocalBounded(t, c, zeroPlan("w", L, 3), 0)
		got, run := runLocalBounded(t, c, zeroPlan("p", L, 3), 16<<10)
		if !slices.Equal(got, want) {
			t.Errorf("%s: losses %v in pieces, %v whole", name, got, want)
		}
		n := countParams(run.Workers()[0].params)
		t.Logf("%s: %d parameters in the first stage, %d KiB", name, n, 4*n>>10)
		if 4*n < 64<<10 {
			t.Fatalf("%s: a stage of %d parameters needs few pieces of 16 KiB", name, n)
		}
	}
}

// runLocalBounded is runLocal over a network that refuses frames past maxPayload bytes
// (0: unbounded).
func runLocalBounded(t *testing.T, cfg JobConfig, plan Plan, maxPayload int) ([]float64, *LocalRun) {
	t.Helper()
	net := NewInMemory(planNodes(plan)...)
	defer net.Close()
	net.SetMaxPayload(maxPayload)
	run, err := NewLocalRun(cfg, plan, testData(), net.Peer)
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for run.StepsDone() < cfg.Train.Steps {
		l, err := run.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l)
	}
	return out, run
}
