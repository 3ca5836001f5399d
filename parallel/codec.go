package parallel

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

// Int8Block is the block size of the int8 codec: one float32 scale per block.
const Int8Block = 256

// Codec compresses float32 vectors for the wire. Decode must reject payloads that do not
// fit n elements (they come from the network).
type Codec interface {
	Name() jobspec.Codec
	Wire() frame.Codec
	Encode(dst []byte, x []float32) []byte
	Decode(x []float32, payload []byte) error
}

// NewCodec returns the codec of that name; topkFraction is the share of elements the topk
// codec keeps (ignored by the others).
func NewCodec(name jobspec.Codec, topkFraction float64) (Codec, error) {
	switch name {
	case jobspec.CodecNone, "":
		return noneCodec{}, nil
	case jobspec.CodecFP16:
		return fp16Codec{}, nil
	case jobspec.CodecInt8:
		return int8Codec{}, nil
	case jobspec.CodecTopK:
		if !(topkFraction > 0 && topkFraction <= 1) {
			return nil, fmt.Errorf("topk fraction must be in (0, 1] (got %g)", topkFraction)
		}
		return topkCodec{fraction: topkFraction}, nil
	}
	return nil, name.Check("codec")
}

// codecForWire returns the decoder of a frame's codec.
func codecForWire(c frame.Codec, topkFraction float64) (Codec, error) {
	switch c {
	case frame.CodecNone:
		return noneCodec{}, nil
	case frame.CodecFP16:
		return fp16Codec{}, nil
	case frame.CodecInt8:
		return int8Codec{}, nil
	case frame.CodecTopK:
		return topkCodec{fraction: topkFraction}, nil
	}
	return nil, fmt.Errorf("unknown codec %d", c)
}

type noneCodec struct{}

func (noneCodec) Name() jobspec.Codec { return jobspec.CodecNone }
func (noneCodec) Wire() frame.Codec   { return frame.CodecNone }
func (noneCodec) Encode(dst []byte, x []float32) []byte {
	return appendF32(dst, x)
}
func (noneCodec) Decode(x []float32, p []byte) error { return decodeF32(x, p) }

// grow extends dst by n bytes and returns the whole slice and the new part.
func grow(dst []byte, n int) ([]byte, []byte) {
	dst = append(dst, make([]byte, n)...)
	return dst, dst[len(dst)-n:]
}

func appendF32(dst []byte, x []float32) []byte {
	dst, out := grow(dst, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return dst
}

func decodeF32(x []float32, p []byte) error {
	if len(p) != 4*len(x) {
		return fmt.Errorf("float32 payload of %d bytes for %d elements", len(p), len(x))
	}
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
	}
	return nil
}

type fp16Codec struct{}

func (fp16Codec) Name() jobspec.Codec { return jobspec.CodecFP16 }
func (fp16Codec) Wire() frame.Codec   { return frame.CodecFP16 }
func (fp16Codec) Encode(dst []byte, x []float32) []byte {
	dst, out := grow(dst, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(out[2*i:], float32ToHalf(v))
	}
	return dst
}
func (fp16Codec) Decode(x []float32, p []byte) error {
	if len(p) != 2*len(x) {
		return fmt.Errorf("fp16 payload of %d bytes for %d elements", len(p), len(x))
	}
	for i := range x {
		x[i] = halfToFloat32(binary.LittleEndian.Uint16(p[2*i:]))
	}
	return nil
}

// float32ToHalf converts to IEEE 754 binary16, rounding to nearest even; out-of-range
// values become ±Inf, NaN stays NaN.
func float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23&0xff) - 127 + 15
	man := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 31: // overflow or Inf
		return sign | 0x7c00
	case exp <= 0: // subnormal or zero
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint(14 - exp)
		h := man >> shift
		rem := man & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, and up to Inf: both correct
	}
	return sign | uint16(h)
}

func halfToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0:
		return math.Float32frombits(sign) + float32(man)*float32(math.Ldexp(1, -24))*sign1(sign)
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	}
	return math.Float32frombits(sign | (exp-15+127)<<23 | man<<13)
}

func sign1(sign uint32) float32 {
	if sign != 0 {
		return -1
	}
	return 1
}

type int8Codec struct{}

func (int8Codec) Name() jobspec.Codec { return jobspec.CodecInt8 }
func (int8Codec) Wire() frame.Codec   { return frame.CodecInt8 }

// Encode writes one float32 scale per block of Int8Block elements (max |x| / 127), then
// every element as round(x / scale) in int8.
func (int8Codec) Encode(dst []byte, x []float32) []byte {
	nb := (len(x) + Int8Block - 1) / Int8Block
	dst, out := grow(dst, 4*nb+len(x))
	q := out[4*nb:]
	for b := 0; b < nb; b++ {
		blk := x[b*Int8Block : min(len(x), (b+1)*Int8Block)]
		var m float32
		for _, v := range blk {
			m = max(m, v, -v)
		}
		scale := m / 127
		binary.LittleEndian.PutUint32(out[4*b:], math.Float32bits(scale))
		inv := float32(0)
		if scale > 0 {
			inv = 1 / scale
		}
		qb := q[b*Int8Block:]
		for i, v := range blk {
			r := v * inv
			// Round half away from zero, clamped to ±127.
			if r >= 0 {
				r += 0.5
			} else {
				r -= 0.5
			}
			qb[i] = byte(int8(max(-127, min(127, int32(r)))))
		}
	}
	return dst
}

func (int8Codec) Decode(x []float32, p []byte) error {
	nb := (len(x) + Int8Block - 1) / Int8Block
	if len(p) != 4*nb+len(x) {
		return fmt.Errorf("int8 payload of %d bytes for %d elements", len(p), len(x))
	}
	scales := make([]float32, nb)
	decodeF32(scales, p[:4*nb])
	q := p[4*nb:]
	for i := range x {
		x[i] = float32(int8(q[i])) * scales[i/Int8Block]
	}
	return nil
}

type topkCodec struct{ fraction float64 }

func (topkCodec) Name() jobspec.Codec { return jobspec.CodecTopK }
func (topkCodec) Wire() frame.Codec   { return frame.CodecTopK }

// Encode keeps the k = ⌈fraction·n⌉ largest-magnitude elements (ties by lower index) as
// k uint32 indices in increasing order followed by their k float32 values. The k-th
// largest magnitude is found by selection in O(n).
func (c topkCodec) Encode(dst []byte, x []float32) []byte {
	k := min(len(x), int(math.Ceil(c.fraction*float64(len(x)))))
	dst, out := grow(dst, 8*k)
	if k == 0 {
		return dst
	}
	mags := make([]float32, len(x))
	for i, v := range x {
		mags[i] = max(v, -v)
		if mags[i] != mags[i] {
			// NaN compares false with everything, which would leave slots unfilled: it
			// ranks as the largest magnitude and is sent (for the receiver to refuse).
			mags[i] = float32(math.Inf(1))
		}
	}
	thr := kthLargest(append([]float32(nil), mags...), k)
	above := 0 // elements strictly above the threshold all go in; ties fill the rest
	for _, m := range mags {
		if m > thr {
			above++
		}
	}
	ties := k - above
	j := 0
	for i, m := range mags {
		if m > thr || (m == thr && ties > 0) {
			if m == thr {
				ties--
			}
			binary.LittleEndian.PutUint32(out[4*j:], uint32(i))
			binary.LittleEndian.PutUint32(out[4*k+4*j:], math.Float32bits(x[i]))
			j++
		}
	}
	return dst
}

// kthLargest returns the k-th largest value of a (1-based), reordering a (quickselect
// with a median-of-three pivot).
func kthLargest(a []float32, k int) float32 {
	lo, hi, target := 0, len(a)-1, k-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		p := medianOf3(a[lo], a[mid], a[hi])
		i, j := lo, hi
		for i <= j {
			for a[i] > p {
				i++
			}
			for a[j] < p {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case target <= j:
			hi = j
		case target >= i:
			lo = i
		default:
			return a[target]
		}
	}
	return a[target]
}

func medianOf3(a, b, c float32) float32 {
	return max(min(a, b), min(max(a, b), c))
}

func (topkCodec) Decode(x []float32, p []byte) error {
	if len(p)%8 != 0 || len(p)/8 > len(x) {
		return fmt.Errorf("topk payload of %d bytes for %d elements", len(p), len(x))
	}
	k := len(p) / 8
	clear(x)
	prev := -1
	for j := 0; j < k; j++ {
		i := int(binary.LittleEndian.Uint32(p[4*j:]))
		if i <= prev || i >= len(x) {
			return fmt.Errorf("topk index %d out of order or range (n=%d)", i, len(x))
		}
		prev = i
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*k+4*j:]))
	}
	return nil
}

// ErrorFeedback compresses successive vectors with a codec, carrying what compression
// lost into the next round (as RedSync and DeMo do): send = C(x + r), r ← x + r − D(send).
type ErrorFeedback struct {
	codec    Codec
	residual []float32
	// memoryless sends C(x) and carries nothing: an audited job's (audit.go), whose
	// contributions must be a function of public inputs, and a residual is not one.
	memoryless bool
}

// NewErrorFeedback returns an error-feedback compressor for vectors of n elements.
func NewErrorFeedback(c Codec, n int) *ErrorFeedback {
	return &ErrorFeedback{codec: c, residual: make([]float32, n)}
}

// Encode compresses x plus the carried residual, updates the residual, and returns the
// payload and the decoded vector it stands for (what the receivers will see).
func (e *ErrorFeedback) Encode(x []float32) (payload []byte, sent []float32) {
	v := make([]float32, len(x))
	for i := range x {
		v[i] = x[i] + e.residual[i]
	}
	payload = e.codec.Encode(nil, v)
	sent = make([]float32, len(x))
	if err := e.codec.Decode(sent, payload); err != nil {
		panic(fmt.Sprintf("parallel: codec %s cannot decode its own output: %v", e.codec.Name(), err))
	}
	if e.memoryless {
		return payload, sent
	}
	for i := range v {
		e.residual[i] = v[i] - sent[i]
	}
	return payload, sent
}
