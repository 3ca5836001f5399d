package frame

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// firstPayloadChunk is the most payload memory a reader commits before any payload byte
// has arrived. Each time the buffer fills it grows at most payloadGrowth-fold, up to the
// header's length: memory committed stays within payloadGrowth × the bytes that arrived
// (plus the first chunk), while an honest frame costs about 7% more allocation and copying
// than one allocated up front (doubling would cost twice the allocation and a full copy).
// BenchmarkRead compares the two.
const (
	firstPayloadChunk = 64 << 10
	payloadGrowth     = 16
)

// Header is a validated frame header read from a stream, before its payload: what a
// receiver needs to account for the payload (PayloadLen) before reading it.
type Header struct {
	frame *Frame // without payload
	n     int
	raw   [HeaderSize]byte
}

// PayloadLen is the payload length the header announces, already checked against the
// bound ReadHeader was given. Nothing has been allocated for it.
func (h *Header) PayloadLen() int { return h.n }

// Kind is the frame's kind.
func (h *Header) Kind() Kind { return h.frame.Kind }

// ReadHeader reads and validates one frame header from r, checking its payload length
// against maxPayload (DefaultMaxPayload when maxPayload ≤ 0). It reads nothing more.
func ReadHeader(r io.Reader, maxPayload int) (*Header, error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	h := &Header{}
	if _, err := io.ReadFull(r, h.raw[:]); err != nil {
		return nil, err
	}
	f, n, err := parseHeader(h.raw[:], maxPayload)
	if err != nil {
		return nil, err
	}
	h.frame, h.n = f, n
	return h, nil
}

// ReadPayload reads the payload h announced from r and returns the whole frame once its
// CRC matches. The payload buffer grows as bytes arrive (from 64 KiB, 16-fold each time it
// fills), so a header that claims a large payload and is followed by nothing costs no more
// than the first chunk.
// A stream that ends early fails with an error wrapping io.ErrUnexpectedEOF.
func (h *Header) ReadPayload(r io.Reader) (*Frame, error) {
	payload, err := readGrowing(r, h.n)
	if err != nil {
		return nil, fmt.Errorf("frame payload: %w", err)
	}
	crc := crc32.Update(crc32.Checksum(h.raw[:52], castagnoli), castagnoli, payload)
	if crc != binary.LittleEndian.Uint32(h.raw[52:]) {
		return nil, ErrCRC
	}
	f := *h.frame
	f.Payload = payload
	return &f, nil
}

// Read reads one frame from r: ReadHeader, then ReadPayload. Memory for the payload is
// committed only as its bytes arrive, and never beyond maxPayload (DefaultMaxPayload when
// maxPayload ≤ 0).
func Read(r io.Reader, maxPayload int) (*Frame, error) {
	h, err := ReadHeader(r, maxPayload)
	if err != nil {
		return nil, err
	}
	return h.ReadPayload(r)
}

// nextPayloadCap is the capacity a full payload buffer of capacity have grows to, for an n-byte
// payload: n once payloadGrowth × have reaches it; before that payloadGrowth × have, but
// no more than n / payloadGrowth, so that the final step to n copies at most 1/16 of the
// payload (and all steps together allocate about 1.07 n).
func nextPayloadCap(have, n int) int {
	if payloadGrowth*have >= n {
		return n
	}
	return min(payloadGrowth*have, (n+payloadGrowth-1)/payloadGrowth)
}

// readGrowing reads exactly n bytes from r into a buffer that starts at firstPayloadChunk
// and grows (nextPayloadCap) whenever it is full, never past n.
func readGrowing(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, firstPayloadChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), nextPayloadCap(cap(buf), n))
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < n {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}
