package parallel

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/meshnode/meshnode/mesh/frame"
)

// A collective's message (a member's contribution, a chunk of a ring, a parameter chunk,
// an outer step's result) can be far larger than one frame may carry: a 100M-parameter
// model's float32 gradient is 400 MB, and the data plane refuses payloads over
// frame.DefaultMaxPayload (256 MiB). sendPieces cuts a message's encoded bytes into
// pieces of PieceBytes bytes, every one but the last exactly that long and the last
// shorter (empty when the message is a multiple of the piece size), all under the
// message's own key: the frames of one key from one sender are received in the order they
// were sent (one stream per frame kind, frame.Mailbox's FIFO per key), so no piece needs a
// number of its own and no other frame's key can be taken. A message shorter than a piece
// is one frame, as before pieces existed.
//
// The receiver (recvPieces) learns the count from the pieces themselves: a short piece ends
// the message. It bounds the whole by what a valid encoding of the elements it expects may
// take (maxWireBytes, from its own length, never from the peer's word), and refuses a
// piece longer than the piece size or one that would take the message past that bound
// before it keeps any of it: a peer that sends pieces without end costs the receiver at
// most the bound.

// PieceBytes bounds one frame of a collective's message (32 MiB), far below the data
// plane's payload bound. Every member of a job must cut at the same size: it is a
// protocol constant, changed only where a test's transport asks for smaller pieces.
const PieceBytes = 32 << 20

// errPieces marks a message whose pieces break the rules above: its sender is at fault,
// not the transport.
var errPieces = errors.New("malformed pieces")

// pieceSizer is a transport that cuts messages at a size of its own (InMemory with a
// payload bound, in tests).
type pieceSizer interface{ PieceBytes() int }

// pieceBytes is the size tr's collectives cut messages at.
func pieceBytes(tr Transport) int {
	if s, ok := tr.(pieceSizer); ok && s.PieceBytes() > 0 {
		return s.PieceBytes()
	}
	return PieceBytes
}

// sendPieces sends f's payload to peer `to` in pieces under f's key (a payload shorter
// than a piece goes as f itself).
func sendPieces(ctx context.Context, tr Transport, to string, f *frame.Frame) error {
	size, rest := pieceBytes(tr), f.Payload
	for {
		n := min(len(rest), size)
		piece := *f
		piece.Payload = rest[:n:n]
		if err := tr.Send(ctx, to, &piece); err != nil {
			return err
		}
		if rest = rest[n:]; n < size {
			return nil
		}
	}
}

// recvPieces receives the message under k from peer `from` and returns it as one frame
// (the first piece's header, the whole payload). A message whose payload would pass
// maxLen, a piece longer than the piece size, or pieces that disagree on their header,
// are refused (errPieces) before their bytes are kept.
func recvPieces(ctx context.Context, tr Transport, from string, k frame.Key, maxLen int) (*frame.Frame, error) {
	size := pieceBytes(tr)
	first, err := tr.Recv(ctx, from, k)
	if err != nil {
		return nil, err
	}
	if err := checkPiece(first, first, size, 0, maxLen); err != nil {
		return nil, err
	}
	if len(first.Payload) < size {
		return first, nil
	}
	whole := *first
	// A raw, fp16 or int8 message is as long as its bound: one allocation, no regrowth.
	// A topk message is far shorter than its bound (8 B/element): grown as pieces arrive.
	capacity := min(maxLen, 4*size)
	if first.Codec != frame.CodecTopK {
		capacity = maxLen
	}
	whole.Payload = make([]byte, 0, capacity)
	whole.Payload = append(whole.Payload, first.Payload...)
	for count := 1; ; count++ {
		f, err := tr.Recv(ctx, from, k)
		if err != nil {
			return nil, fmt.Errorf("piece %d: %w", count, err)
		}
		if err := checkPiece(f, first, size, len(whole.Payload), maxLen); err != nil {
			return nil, fmt.Errorf("piece %d: %w", count, err)
		}
		whole.Payload = append(whole.Payload, f.Payload...)
		if len(f.Payload) < size {
			return &whole, nil
		}
	}
}

// checkPiece says whether piece f may follow have bytes of the message first began.
func checkPiece(f, first *frame.Frame, size, have, maxLen int) error {
	switch {
	case len(f.Payload) > size:
		return fmt.Errorf("%w: a piece of %d bytes, pieces are at most %d", errPieces, len(f.Payload), size)
	case len(f.Payload) > maxLen-have:
		return fmt.Errorf("%w: the message passes %d bytes, the most its elements take", errPieces, maxLen)
	case f.DType != first.DType || f.Codec != first.Codec || !slices.Equal(f.Shape, first.Shape):
		return fmt.Errorf("%w: a piece of dtype %d codec %d shape %v after dtype %d codec %d shape %v",
			errPieces, f.DType, f.Codec, f.Shape, first.DType, first.Codec, first.Shape)
	}
	return nil
}

// maxWireBytes is the longest payload a valid encoding of n elements by codec c takes.
func maxWireBytes(c frame.Codec, n int) int {
	switch c {
	case frame.CodecFP16:
		return 2 * n
	case frame.CodecInt8:
		return 4*((n+Int8Block-1)/Int8Block) + n
	case frame.CodecTopK:
		return 8 * n
	}
	return 4 * n
}
