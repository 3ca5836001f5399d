package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// A tensor frame on the data plane: a fixed HeaderSize-byte little-endian header, then
// PayloadLen bytes of payload.
//
//	off  size  field
//	0    4     magic "MNTF"
//	4    1     version (Version)
//	5    1     kind (Kind)
//	6    1     dtype (DType)
//	7    1     codec (Codec)
//	8    8     job
//	16   4     epoch
//	20   4     step
//	24   2     micro-batch
//	26   2     index: the layer, stage or chunk the frame is about
//	28   1     ndim (0–4)
//	29   3     reserved, zero
//	32   16    shape: 4 × uint32, unused dimensions zero
//	48   4     payload length
//	52   4     CRC32C (Castagnoli) of header bytes [0, 52) followed by the payload
const (
	HeaderSize = 56
	Version    = 1
	// MaxDims is the most dimensions a frame's shape may have.
	MaxDims = 4
	// DefaultMaxPayload bounds a frame's payload unless a reader sets its own bound.
	DefaultMaxPayload = 256 << 20
)

var magic = [4]byte{'M', 'N', 'T', 'F'}

// Kind says what a frame carries. Values are append-only.
type Kind uint8

const (
	// KindActivation carries a stage's output forward to the next stage.
	KindActivation Kind = 1
	// KindGradient carries the gradient of an activation back to the previous stage.
	KindGradient Kind = 2
	// KindReduce carries a chunk of a collective (all-reduce of gradients or
	// pseudo-gradients) between replicas.
	KindReduce Kind = 3
	// KindScalar carries small vectors: squared gradient norms, losses.
	KindScalar Kind = 4
	// KindProbe frames measure a link over the data plane itself; the data plane answers
	// or consumes them and never hands them to a Mailbox. Their payload is bounded by
	// MaxProbePayload in the header.
	KindProbe Kind = 5
	maxKind        = KindProbe
)

// MaxProbePayload bounds the payload of one KindProbe frame, checked in the header before
// anything is allocated.
const MaxProbePayload = 64 << 20

// DType is the element type of a frame's payload after decoding its codec.
type DType uint8

const (
	DTypeF32 DType = 1
	DTypeF16 DType = 2
	DTypeI8  DType = 3
	DTypeU8  DType = 4
	maxDType       = DTypeU8
)

// Codec says how a payload is compressed. Values are append-only.
type Codec uint8

const (
	CodecNone Codec = 0
	CodecFP16 Codec = 1
	CodecInt8 Codec = 2
	CodecTopK Codec = 3
	maxCodec        = CodecTopK
)

// Frame is one decoded tensor frame.
type Frame struct {
	Kind    Kind
	DType   DType
	Codec   Codec
	Job     uint64
	Epoch   uint32
	Step    uint32
	Micro   uint16
	Index   uint16
	Shape   []int
	Payload []byte
}

// Frame errors; readers branch on them to pick a stream reset code.
var (
	ErrMagic   = errors.New("frame: bad magic")
	ErrVersion = errors.New("frame: unsupported version")
	ErrKind    = errors.New("frame: unknown kind")
	ErrHeader  = errors.New("frame: malformed header")
	ErrTooBig  = errors.New("frame: payload exceeds the bound")
	ErrCRC     = errors.New("frame: CRC mismatch")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Elements is the number of elements of the frame's shape (1 for a scalar shape).
func (f *Frame) Elements() int {
	n := 1
	for _, d := range f.Shape {
		n *= d
	}
	return n
}

// Append appends the encoding of f to dst.
func Append(dst []byte, f *Frame) ([]byte, error) {
	if len(f.Shape) > MaxDims {
		return dst, fmt.Errorf("%w: %d dimensions, at most %d", ErrHeader, len(f.Shape), MaxDims)
	}
	if uint64(len(f.Payload)) > 1<<32-1 {
		return dst, fmt.Errorf("%w: %d bytes", ErrTooBig, len(f.Payload))
	}
	var h [HeaderSize]byte
	copy(h[0:4], magic[:])
	h[4], h[5], h[6], h[7] = Version, byte(f.Kind), byte(f.DType), byte(f.Codec)
	binary.LittleEndian.PutUint64(h[8:], f.Job)
	binary.LittleEndian.PutUint32(h[16:], f.Epoch)
	binary.LittleEndian.PutUint32(h[20:], f.Step)
	binary.LittleEndian.PutUint16(h[24:], f.Micro)
	binary.LittleEndian.PutUint16(h[26:], f.Index)
	h[28] = byte(len(f.Shape))
	for i, d := range f.Shape {
		if d < 0 || uint64(d) > 1<<32-1 {
			return dst, fmt.Errorf("%w: dimension %d", ErrHeader, d)
		}
		binary.LittleEndian.PutUint32(h[32+4*i:], uint32(d))
	}
	binary.LittleEndian.PutUint32(h[48:], uint32(len(f.Payload)))
	crc := crc32.Update(crc32.Checksum(h[:52], castagnoli), castagnoli, f.Payload)
	binary.LittleEndian.PutUint32(h[52:], crc)
	dst = append(dst, h[:]...)
	return append(dst, f.Payload...), nil
}

// AppendHeader appends the HeaderSize-byte header Append would write for f, so that the
// payload can be written from the caller's slice instead of being copied: it encodes f
// without payload, then sets the length and the CRC32C of header and payload.
// TestAppendHeaderMatchesAppend keeps it equal to Append.
func AppendHeader(dst []byte, f *Frame) ([]byte, error) {
	if uint64(len(f.Payload)) > 1<<32-1 {
		return dst, fmt.Errorf("%w: %d bytes", ErrTooBig, len(f.Payload))
	}
	empty := *f
	empty.Payload = nil
	out, err := Append(dst, &empty)
	if err != nil {
		return dst, err
	}
	h := out[len(dst):]
	binary.LittleEndian.PutUint32(h[48:], uint32(len(f.Payload)))
	crc := crc32.Update(crc32.Checksum(h[:52], castagnoli), castagnoli, f.Payload)
	binary.LittleEndian.PutUint32(h[52:], crc)
	return out, nil
}

// Write writes f to w as one frame.
func Write(w io.Writer, f *Frame) error {
	b, err := Append(make([]byte, 0, HeaderSize+len(f.Payload)), f)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// parseHeader validates a header and returns the frame without payload and the
// payload length, which is checked against maxPayload before anything is allocated.
func parseHeader(h []byte, maxPayload int) (*Frame, int, error) {
	if [4]byte(h[0:4]) != magic {
		return nil, 0, ErrMagic
	}
	if h[4] != Version {
		return nil, 0, fmt.Errorf("%w %d", ErrVersion, h[4])
	}
	f := &Frame{Kind: Kind(h[5]), DType: DType(h[6]), Codec: Codec(h[7])}
	if f.Kind == 0 || f.Kind > maxKind {
		return nil, 0, fmt.Errorf("%w %d", ErrKind, h[5])
	}
	if f.DType == 0 || f.DType > maxDType || f.Codec > maxCodec || h[28] > MaxDims || h[29]|h[30]|h[31] != 0 {
		return nil, 0, fmt.Errorf("%w: dtype %d, codec %d, ndim %d", ErrHeader, h[6], h[7], h[28])
	}
	f.Job = binary.LittleEndian.Uint64(h[8:])
	f.Epoch = binary.LittleEndian.Uint32(h[16:])
	f.Step = binary.LittleEndian.Uint32(h[20:])
	f.Micro = binary.LittleEndian.Uint16(h[24:])
	f.Index = binary.LittleEndian.Uint16(h[26:])
	ndim := int(h[28])
	f.Shape = make([]int, ndim)
	elems := uint64(1)
	for i := 0; i < ndim; i++ {
		f.Shape[i] = int(binary.LittleEndian.Uint32(h[32+4*i:]))
		elems *= uint64(f.Shape[i])
		if elems > 1<<40 {
			return nil, 0, fmt.Errorf("%w: shape %v too large", ErrHeader, f.Shape[:i+1])
		}
	}
	for i := ndim; i < MaxDims; i++ {
		if binary.LittleEndian.Uint32(h[32+4*i:]) != 0 {
			return nil, 0, fmt.Errorf("%w: unused dimension %d is not zero", ErrHeader, i)
		}
	}
	n := binary.LittleEndian.Uint32(h[48:])
	if uint64(n) > uint64(maxPayload) || (f.Kind == KindProbe && n > MaxProbePayload) {
		return nil, 0, fmt.Errorf("%w: %d bytes > %d", ErrTooBig, n, maxPayload)
	}
	return f, int(n), nil
}

// Decode decodes exactly one frame held in b.
func Decode(b []byte, maxPayload int) (*Frame, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrHeader, len(b))
	}
	f, n, err := parseHeader(b[:HeaderSize], maxPayload)
	if err != nil {
		return nil, err
	}
	if len(b) != HeaderSize+n {
		return nil, fmt.Errorf("%w: %d payload bytes, header says %d", ErrHeader, len(b)-HeaderSize, n)
	}
	f.Payload = b[HeaderSize:]
	crc := crc32.Update(crc32.Checksum(b[:52], castagnoli), castagnoli, f.Payload)
	if crc != binary.LittleEndian.Uint32(b[52:]) {
		return nil, ErrCRC
	}
	return f, nil
}
