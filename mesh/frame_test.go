package mesh

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

func sampleFrame() *Frame {
	return &Frame{Kind: KindActivation, DType: DTypeF32, Codec: CodecNone, Job: 7, Epoch: 2, Step: 31,
		Micro: 3, Index: 5, Shape: []int{2, 3}, Payload: bytes.Repeat([]byte{1, 2, 3, 4}, 6)}
}

func TestFrameRoundTrip(t *testing.T) {
	f := sampleFrame()
	var buf bytes.Buffer
	if err := WriteFrame(&buf, f); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != FrameHeaderSize+24 {
		t.Fatalf("encoded %d bytes", buf.Len())
	}
	got, err := ReadFrame(bytes.NewReader(buf.Bytes()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip: %+v, want %+v", got, f)
	}
	if d, err := DecodeFrame(buf.Bytes(), 1<<10); err != nil || !reflect.DeepEqual(d, f) {
		t.Fatalf("DecodeFrame: %+v, %v", d, err)
	}
}

func TestFrameRejectsBadInputBeforeAllocating(t *testing.T) {
	good, _ := AppendFrame(nil, sampleFrame())
	mutate := func(fn func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		fn(b)
		return b
	}
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"magic":     {mutate(func(b []byte) { b[0] = 'X' }), ErrFrameMagic},
		"version":   {mutate(func(b []byte) { b[4] = 9 }), ErrFrameVersion},
		"kind":      {mutate(func(b []byte) { b[5] = 200 }), ErrFrameKind},
		"dtype":     {mutate(func(b []byte) { b[6] = 0 }), ErrFrameHeader},
		"ndim":      {mutate(func(b []byte) { b[28] = 5 }), ErrFrameHeader},
		"oversized": {mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[48:], 1<<31) }), ErrFrameTooBig},
		"crc":       {mutate(func(b []byte) { b[len(b)-1] ^= 1 }), ErrFrameCRC},
		"shape":     {mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[44:], 1) }), ErrFrameHeader},
	}
	for name, c := range cases {
		// A bound of 1 KiB: the oversized frame must fail on its header alone.
		_, err := ReadFrame(bytes.NewReader(c.b), 1<<10)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func FuzzFrameDecode(f *testing.F) {
	good, _ := AppendFrame(nil, sampleFrame())
	f.Add(good)
	empty, _ := AppendFrame(nil, &Frame{Kind: KindScalar, DType: DTypeF32})
	f.Add(empty)
	f.Add(good[:FrameHeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := ReadFrame(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		if len(fr.Payload) > 1<<16 || len(fr.Shape) > MaxFrameDims {
			t.Fatalf("accepted frame beyond its bounds: %d bytes, %d dims", len(fr.Payload), len(fr.Shape))
		}
		again, err := AppendFrame(nil, fr)
		if err != nil || !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("accepted frame does not re-encode to its input: %v", err)
		}
	})
}
