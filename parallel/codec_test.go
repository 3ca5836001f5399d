package parallel

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

func randVec(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func TestHalfConversion(t *testing.T) {
	cases := map[float32]uint16{0: 0, 1: 0x3c00, -2: 0xc000, 65504: 0x7bff, 1e6: 0x7c00,
		5.960464477539063e-08: 0x0001, 0.333251953125: 0x3555, 1.0009765625: 0x3c01}
	for f, h := range cases {
		if got := float32ToHalf(f); got != h {
			t.Errorf("half(%g) = %#04x, want %#04x", f, got, h)
		}
		if h != 0x7c00 && halfToFloat32(h) != f {
			t.Errorf("float(%#04x) = %g, want %g", h, halfToFloat32(h), f)
		}
	}
	// Round to nearest even: 1 + 2⁻¹¹ is halfway between 1 and 1 + 2⁻¹⁰.
	if got := float32ToHalf(1 + 1.0/2048); got != 0x3c00 {
		t.Errorf("tie rounds to even: %#04x", got)
	}
	if v := halfToFloat32(float32ToHalf(float32(math.NaN()))); v == v {
		t.Error("NaN lost")
	}
}

func TestCodecsRoundTripWithinTheirPrecision(t *testing.T) {
	x := randVec(1000, 3)
	for _, c := range []struct {
		name jobspec.Codec
		tol  float64 // relative to max |x|
	}{{jobspec.CodecNone, 0}, {jobspec.CodecFP16, 1e-3}, {jobspec.CodecInt8, 1.0 / 254}} {
		codec, _ := NewCodec(c.name, 0)
		p := codec.Encode(nil, x)
		y := make([]float32, len(x))
		if err := codec.Decode(y, p); err != nil {
			t.Fatal(err)
		}
		for i := range x {
			if math.Abs(float64(x[i]-y[i])) > c.tol*4.5+1e-12 {
				t.Fatalf("%s: x[%d] = %g decoded as %g", c.name, i, x[i], y[i])
			}
		}
		if err := codec.Decode(y[:999], p); err == nil {
			t.Errorf("%s: payload for 1000 elements decoded into 999", c.name)
		}
	}
	int8c, _ := NewCodec(jobspec.CodecInt8, 0)
	if n := len(int8c.Encode(nil, x)); n != 1000+4*4 {
		t.Errorf("int8 payload %d bytes, want %d", n, 1016)
	}
}

func TestTopKKeepsLargestAndRejectsBadIndices(t *testing.T) {
	x := []float32{0.1, -5, 0.2, 3, -0.3, 4, 0, 0}
	c, _ := NewCodec(jobspec.CodecTopK, 0.375) // k = 3
	p := c.Encode(nil, x)
	y := make([]float32, len(x))
	if err := c.Decode(y, p); err != nil {
		t.Fatal(err)
	}
	want := []float32{0, -5, 0, 3, 0, 4, 0, 0}
	for i := range want {
		if y[i] != want[i] {
			t.Fatalf("topk decoded %v, want %v", y, want)
		}
	}
	bad := append([]byte(nil), p...)
	bad[0] = 9 // index 9 out of range
	if err := c.Decode(y, bad); err == nil {
		t.Fatal("out-of-range index accepted")
	}
}

// TestErrorFeedbackDeliversEverythingEventually: the sum of what error feedback sends
// converges to the sum of its inputs; what compression drops is delayed, not lost.
func TestErrorFeedbackDeliversEverythingEventually(t *testing.T) {
	c, _ := NewCodec(jobspec.CodecTopK, 0.1)
	ef := NewErrorFeedback(c, 200)
	x := randVec(200, 5)
	sent := make([]float32, 200)
	const rounds = 60
	for r := 0; r < rounds; r++ {
		_, s := ef.Encode(x)
		for i := range s {
			sent[i] += s[i]
		}
	}
	for i := range x {
		// Σ sent = rounds·x − residual, and the residual stays bounded.
		if math.Abs(float64(sent[i]-rounds*x[i])) > 0.2*rounds*math.Abs(float64(x[i]))+12 {
			t.Fatalf("element %d: sent %g over %d rounds, inputs sum to %g", i, sent[i], rounds, rounds*x[i])
		}
	}
}

func FuzzCodecDecode(f *testing.F) {
	x := randVec(300, 9)
	for _, name := range []jobspec.Codec{jobspec.CodecNone, jobspec.CodecFP16, jobspec.CodecInt8, jobspec.CodecTopK} {
		c, _ := NewCodec(name, 0.05)
		f.Add(uint8(c.Wire()), uint16(300), c.Encode(nil, x))
	}
	f.Fuzz(func(t *testing.T, wire uint8, n uint16, payload []byte) {
		c, err := codecForWire(frame.Codec(wire), 0.05)
		if err != nil {
			return
		}
		y := make([]float32, n)
		_ = c.Decode(y, payload) // must not panic or write out of bounds
	})
}

func TestKthLargest(t *testing.T) {
	for n := 1; n < 60; n += 7 {
		x := randVec(n, uint64(n))
		x = append(x, x[:n/3]...) // duplicates
		for k := 1; k <= len(x); k += 3 {
			sorted := append([]float32(nil), x...)
			for i := range sorted { // insertion sort, descending
				for j := i; j > 0 && sorted[j] > sorted[j-1]; j-- {
					sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
				}
			}
			if got := kthLargest(append([]float32(nil), x...), k); got != sorted[k-1] {
				t.Fatalf("n=%d k=%d: %g, want %g", len(x), k, got, sorted[k-1])
			}
		}
	}
}
