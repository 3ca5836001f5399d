package speedproof

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// ProtocolID is the speed proof's stream protocol: one challenge, one answer per stream.
const ProtocolID protocol.ID = "/meshnode/speedproof/1.0.0"

// Bounds on a challenge: what one may cost a prover, fixed whatever a verifier asks.
const (
	// MaxFLOPs bounds one challenge's work: 2^39 ≈ 5.5e11 FLOP, about 11 s at 50 GFLOP/s.
	MaxFLOPs = 1 << 39
	// MinRows and MaxRows bound the chain's rows (MinRows: at least Samples to check).
	MinRows, MaxRows = Samples, 4096
	// MinCols and MaxCols bound its columns, a multiple of ColsAlign.
	MinCols, MaxCols, ColsAlign = 16, 1024, 16
	// MaxLinks bounds the chain's length.
	MaxLinks = 4096
	// MaxPathLen bounds the kernel path's name in an answer.
	MaxPathLen = 16
)

// Challenge is what a verifier asks: the chain of Links products of a Rows×Cols matrix
// with Cols×Cols ones, drawn from Seed (chain.go).
type Challenge struct {
	Seed  [32]byte
	Rows  int
	Cols  int
	Links int
}

// Answer is what a prover returns: the name of the kernel path that computed the chain
// (kernels.GemmName) and the hash of each of its rows, RowHashSize bytes each, in order.
type Answer struct {
	Path   string
	Hashes []byte
}

// wireVersion is the first byte of every message; a change of layout gets a new one.
const wireVersion = 1

// challengeLen is the encoded challenge's length: version, seed, rows, cols, links.
const challengeLen = 1 + 32 + 3*2

// ErrMalformed marks a message that does not decode or is out of bounds.
var ErrMalformed = errors.New("speedproof: malformed message")

// Validate checks c against the bounds, so that no challenge costs a prover more than
// MaxFLOPs or allocates more than MaxRows×MaxCols floats per matrix.
func (c Challenge) Validate() error {
	switch {
	case c.Rows < MinRows || c.Rows > MaxRows:
		return fmt.Errorf("%w: rows %d outside [%d, %d]", ErrMalformed, c.Rows, MinRows, MaxRows)
	case c.Cols < MinCols || c.Cols > MaxCols || c.Cols%ColsAlign != 0:
		return fmt.Errorf("%w: cols %d outside [%d, %d] or not a multiple of %d", ErrMalformed, c.Cols, MinCols, MaxCols, ColsAlign)
	case c.Links < 1 || c.Links > MaxLinks:
		return fmt.Errorf("%w: links %d outside [1, %d]", ErrMalformed, c.Links, MaxLinks)
	case c.FLOPs() > MaxFLOPs:
		return fmt.Errorf("%w: %.3g FLOP exceeds %d", ErrMalformed, c.FLOPs(), MaxFLOPs)
	}
	return nil
}

// MarshalBinary encodes a valid challenge.
func (c Challenge) MarshalBinary() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, challengeLen)
	b = append(b, wireVersion)
	b = append(b, c.Seed[:]...)
	for _, v := range []int{c.Rows, c.Cols, c.Links} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	return b, nil
}

// UnmarshalBinary decodes and validates a challenge.
func (c *Challenge) UnmarshalBinary(b []byte) error {
	if len(b) != challengeLen || b[0] != wireVersion {
		return fmt.Errorf("%w: challenge of %d bytes (want %d, version %d)", ErrMalformed, len(b), challengeLen, wireVersion)
	}
	var d Challenge
	copy(d.Seed[:], b[1:33])
	d.Rows = int(binary.BigEndian.Uint16(b[33:]))
	d.Cols = int(binary.BigEndian.Uint16(b[35:]))
	d.Links = int(binary.BigEndian.Uint16(b[37:]))
	if err := d.Validate(); err != nil {
		return err
	}
	*c = d
	return nil
}

// ReadChallenge reads one encoded challenge (exactly challengeLen bytes) from r.
func ReadChallenge(r io.Reader) (Challenge, error) {
	b := make([]byte, challengeLen)
	if _, err := io.ReadFull(r, b); err != nil {
		return Challenge{}, fmt.Errorf("read challenge: %w", err)
	}
	var c Challenge
	return c, c.UnmarshalBinary(b)
}

// answerHeaderLen is the answer's header: version, path length, rows.
const answerHeaderLen = 1 + 1 + 2

// MarshalBinary encodes an answer: version, path length, rows (uint16), path, hashes.
func (a Answer) MarshalBinary() ([]byte, error) {
	rows := len(a.Hashes) / RowHashSize
	if len(a.Path) > MaxPathLen || len(a.Hashes)%RowHashSize != 0 || rows > MaxRows {
		return nil, fmt.Errorf("%w: answer with a %d-byte path and %d bytes of hashes", ErrMalformed, len(a.Path), len(a.Hashes))
	}
	b := make([]byte, 0, answerHeaderLen+len(a.Path)+len(a.Hashes))
	b = append(b, wireVersion, byte(len(a.Path)))
	b = binary.BigEndian.AppendUint16(b, uint16(rows))
	b = append(b, a.Path...)
	return append(b, a.Hashes...), nil
}

// ReadAnswer reads the answer to c from r: its header first, then exactly the path and
// c.Rows hashes it must hold, so that nothing beyond MaxPathLen + MaxRows·RowHashSize
// bytes is ever allocated.
func ReadAnswer(r io.Reader, c Challenge) (Answer, error) {
	h := make([]byte, answerHeaderLen)
	if _, err := io.ReadFull(r, h); err != nil {
		return Answer{}, fmt.Errorf("read answer: %w", err)
	}
	pathLen, rows := int(h[1]), int(binary.BigEndian.Uint16(h[2:]))
	if h[0] != wireVersion || pathLen > MaxPathLen || rows != c.Rows {
		return Answer{}, fmt.Errorf("%w: answer of version %d with a %d-byte path and %d rows (want %d)", ErrMalformed, h[0], pathLen, rows, c.Rows)
	}
	body := make([]byte, pathLen+rows*RowHashSize)
	if _, err := io.ReadFull(r, body); err != nil {
		return Answer{}, fmt.Errorf("read answer: %w", err)
	}
	return Answer{Path: string(body[:pathLen]), Hashes: body[pathLen:]}, nil
}
