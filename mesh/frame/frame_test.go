package frame

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
	if err := Write(&buf, f); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != HeaderSize+24 {
		t.Fatalf("encoded %d bytes", buf.Len())
	}
	got, err := Read(bytes.NewReader(buf.Bytes()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, f) {
		t.Fatalf("round trip: %+v, want %+v", got, f)
	}
	if d, err := Decode(buf.Bytes(), 1<<10); err != nil || !reflect.DeepEqual(d, f) {
		t.Fatalf("Decode: %+v, %v", d, err)
	}
}

func TestFrameRejectsBadInputBeforeAllocating(t *testing.T) {
	good, _ := Append(nil, sampleFrame())
	mutate := func(fn func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		fn(b)
		return b
	}
	cases := map[string]struct {
		b    []byte
		want error
	}{
		"magic":     {mutate(func(b []byte) { b[0] = 'X' }), ErrMagic},
		"version":   {mutate(func(b []byte) { b[4] = 9 }), ErrVersion},
		"kind":      {mutate(func(b []byte) { b[5] = 200 }), ErrKind},
		"dtype":     {mutate(func(b []byte) { b[6] = 0 }), ErrHeader},
		"ndim":      {mutate(func(b []byte) { b[28] = 5 }), ErrHeader},
		"oversized": {mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[48:], 1<<31) }), ErrTooBig},
		"crc":       {mutate(func(b []byte) { b[len(b)-1] ^= 1 }), ErrCRC},
		"shape":     {mutate(func(b []byte) { binary.LittleEndian.PutUint32(b[44:], 1) }), ErrHeader},
	}
	for name, c := range cases {
		// A bound of 1 KiB: the oversized frame must fail on its header alone.
		_, err := Read(bytes.NewReader(c.b), 1<<10)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestAppendHeaderMatchesAppend(t *testing.T) {
	for _, f := range []*Frame{
		sampleFrame(),
		{Kind: KindScalar, DType: DTypeF32, Codec: CodecNone},
		{Kind: KindReduce, DType: DTypeI8, Codec: CodecInt8, Job: 1 << 60, Epoch: 9, Step: 1 << 31, Micro: 65535, Index: 7,
			Shape: []int{2, 3, 4, 5}, Payload: bytes.Repeat([]byte{9, 8, 7}, 40)},
	} {
		want, err := Append([]byte("prefix"), f)
		if err != nil {
			t.Fatal(err)
		}
		hdr, err := AppendHeader([]byte("prefix"), f)
		if err != nil {
			t.Fatal(err)
		}
		if got := append(hdr, f.Payload...); !bytes.Equal(got, want) {
			t.Errorf("kind %d: header+payload differs from Append", f.Kind)
		}
	}
	if _, err := AppendHeader(nil, &Frame{Kind: KindScalar, Shape: make([]int, 5)}); !errors.Is(err, ErrHeader) {
		t.Errorf("5 dimensions: %v, want ErrHeader", err)
	}
}

func FuzzFrameDecode(f *testing.F) {
	good, _ := Append(nil, sampleFrame())
	f.Add(good)
	empty, _ := Append(nil, &Frame{Kind: KindScalar, DType: DTypeF32})
	f.Add(empty)
	f.Add(good[:HeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Read(bytes.NewReader(b), 1<<16)
		if err != nil {
			return
		}
		if len(fr.Payload) > 1<<16 || len(fr.Shape) > MaxDims {
			t.Fatalf("accepted frame beyond its bounds: %d bytes, %d dims", len(fr.Payload), len(fr.Shape))
		}
		again, err := Append(nil, fr)
		if err != nil || !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("accepted frame does not re-encode to its input: %v", err)
		}
	})
}
