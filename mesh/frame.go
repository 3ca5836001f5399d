package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// TensorALPN is the ALPN of the QUIC tensor data plane.
const TensorALPN = "meshnode-tensor/1"

// A tensor frame on the data plane: a fixed FrameHeaderSize-byte little-endian header, then
// PayloadLen bytes of payload.
//
//	off  size  field
//	0    4     magic "MNTF"
//	4    1     version (FrameVersion)
//	5    1     kind (FrameKind)
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
	FrameHeaderSize = 56
	FrameVersion    = 1
	// MaxFrameDims is the most dimensions a frame's shape may have.
	MaxFrameDims = 4
	// DefaultMaxPayload bounds a frame's payload unless a reader sets its own bound.
	DefaultMaxPayload = 256 << 20
)

var frameMagic = [4]byte{'M', 'N', 'T', 'F'}

// FrameKind says what a frame carries. Values are append-only.
type FrameKind uint8

const (
	// KindActivation carries a stage's output forward to the next stage.
	KindActivation FrameKind = 1
	// KindGradient carries the gradient of an activation back to the previous stage.
	KindGradient FrameKind = 2
	// KindReduce carries a chunk of a collective (all-reduce of gradients or
	// pseudo-gradients) between replicas.
	KindReduce FrameKind = 3
	// KindScalar carries small vectors: squared gradient norms, losses.
	KindScalar FrameKind = 4
	maxKind              = KindProbe // dataplane_probe.go
)

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
	Kind    FrameKind
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
	ErrFrameMagic   = errors.New("frame: bad magic")
	ErrFrameVersion = errors.New("frame: unsupported version")
	ErrFrameKind    = errors.New("frame: unknown kind")
	ErrFrameHeader  = errors.New("frame: malformed header")
	ErrFrameTooBig  = errors.New("frame: payload exceeds the bound")
	ErrFrameCRC     = errors.New("frame: CRC mismatch")
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

// AppendFrame appends the encoding of f to dst.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	if len(f.Shape) > MaxFrameDims {
		return dst, fmt.Errorf("%w: %d dimensions, at most %d", ErrFrameHeader, len(f.Shape), MaxFrameDims)
	}
	if uint64(len(f.Payload)) > 1<<32-1 {
		return dst, fmt.Errorf("%w: %d bytes", ErrFrameTooBig, len(f.Payload))
	}
	var h [FrameHeaderSize]byte
	copy(h[0:4], frameMagic[:])
	h[4], h[5], h[6], h[7] = FrameVersion, byte(f.Kind), byte(f.DType), byte(f.Codec)
	binary.LittleEndian.PutUint64(h[8:], f.Job)
	binary.LittleEndian.PutUint32(h[16:], f.Epoch)
	binary.LittleEndian.PutUint32(h[20:], f.Step)
	binary.LittleEndian.PutUint16(h[24:], f.Micro)
	binary.LittleEndian.PutUint16(h[26:], f.Index)
	h[28] = byte(len(f.Shape))
	for i, d := range f.Shape {
		if d < 0 || uint64(d) > 1<<32-1 {
			return dst, fmt.Errorf("%w: dimension %d", ErrFrameHeader, d)
		}
		binary.LittleEndian.PutUint32(h[32+4*i:], uint32(d))
	}
	binary.LittleEndian.PutUint32(h[48:], uint32(len(f.Payload)))
	crc := crc32.Update(crc32.Checksum(h[:52], castagnoli), castagnoli, f.Payload)
	binary.LittleEndian.PutUint32(h[52:], crc)
	dst = append(dst, h[:]...)
	return append(dst, f.Payload...), nil
}

// WriteFrame writes f to w as one frame.
func WriteFrame(w io.Writer, f *Frame) error {
	b, err := AppendFrame(make([]byte, 0, FrameHeaderSize+len(f.Payload)), f)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// parseFrameHeader validates a header and returns the frame without payload and the
// payload length, which is checked against maxPayload before anything is allocated.
func parseFrameHeader(h []byte, maxPayload int) (*Frame, int, error) {
	if [4]byte(h[0:4]) != frameMagic {
		return nil, 0, ErrFrameMagic
	}
	if h[4] != FrameVersion {
		return nil, 0, fmt.Errorf("%w %d", ErrFrameVersion, h[4])
	}
	f := &Frame{Kind: FrameKind(h[5]), DType: DType(h[6]), Codec: Codec(h[7])}
	if f.Kind == 0 || f.Kind > maxKind {
		return nil, 0, fmt.Errorf("%w %d", ErrFrameKind, h[5])
	}
	if f.DType == 0 || f.DType > maxDType || f.Codec > maxCodec || h[28] > MaxFrameDims || h[29]|h[30]|h[31] != 0 {
		return nil, 0, fmt.Errorf("%w: dtype %d, codec %d, ndim %d", ErrFrameHeader, h[6], h[7], h[28])
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
			return nil, 0, fmt.Errorf("%w: shape %v too large", ErrFrameHeader, f.Shape[:i+1])
		}
	}
	for i := ndim; i < MaxFrameDims; i++ {
		if binary.LittleEndian.Uint32(h[32+4*i:]) != 0 {
			return nil, 0, fmt.Errorf("%w: unused dimension %d is not zero", ErrFrameHeader, i)
		}
	}
	n := binary.LittleEndian.Uint32(h[48:])
	if uint64(n) > uint64(maxPayload) || !probePayloadOK(f.Kind, n) {
		return nil, 0, fmt.Errorf("%w: %d bytes > %d", ErrFrameTooBig, n, maxPayload)
	}
	return f, int(n), nil
}

// ReadFrame reads one frame from r, allocating at most maxPayload bytes for its payload
// (DefaultMaxPayload when maxPayload ≤ 0) and only after the header has been validated.
func ReadFrame(r io.Reader, maxPayload int) (*Frame, error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	var h [FrameHeaderSize]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	f, n, err := parseFrameHeader(h[:], maxPayload)
	if err != nil {
		return nil, err
	}
	f.Payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.Payload); err != nil {
		return nil, fmt.Errorf("frame payload: %w", err)
	}
	crc := crc32.Update(crc32.Checksum(h[:52], castagnoli), castagnoli, f.Payload)
	if crc != binary.LittleEndian.Uint32(h[52:]) {
		return nil, ErrFrameCRC
	}
	return f, nil
}

// DecodeFrame decodes exactly one frame held in b.
func DecodeFrame(b []byte, maxPayload int) (*Frame, error) {
	if len(b) < FrameHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameHeader, len(b))
	}
	f, n, err := parseFrameHeader(b[:FrameHeaderSize], maxPayload)
	if err != nil {
		return nil, err
	}
	if len(b) != FrameHeaderSize+n {
		return nil, fmt.Errorf("%w: %d payload bytes, header says %d", ErrFrameHeader, len(b)-FrameHeaderSize, n)
	}
	f.Payload = b[FrameHeaderSize:]
	crc := crc32.Update(crc32.Checksum(b[:52], castagnoli), castagnoli, f.Payload)
	if crc != binary.LittleEndian.Uint32(b[52:]) {
		return nil, ErrFrameCRC
	}
	return f, nil
}
