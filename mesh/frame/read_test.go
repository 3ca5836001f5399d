package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"runtime"
	"testing"
	"testing/iotest"
)

// A header that claims the largest payload the bound allows, followed by nothing, must not
// make the reader allocate that payload: memory is committed as bytes arrive.
func TestReadDoesNotAllocateTheClaimedPayload(t *testing.T) {
	hdr, err := AppendHeader(nil, &Frame{Kind: KindActivation, DType: DTypeU8})
	if err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(hdr[48:], DefaultMaxPayload) // claims 256 MiB, sends none
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = Read(bytes.NewReader(hdr), DefaultMaxPayload)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("reading a bare 256 MiB header allocated %d bytes; at most 1 MiB expected", got)
	}
}

// Payloads that arrive in dribbles and in odd sizes around the growth steps read back
// exactly.
func TestReadGrowsToThePayload(t *testing.T) {
	for _, n := range []int{0, 1, firstPayloadChunk - 1, firstPayloadChunk, firstPayloadChunk + 1, 3*firstPayloadChunk + 7, 1 << 20} {
		payload := bytes.Repeat([]byte{1, 2, 3, 5, 8, 13, 21}, n/7+1)[:n]
		f := &Frame{Kind: KindReduce, DType: DTypeU8, Shape: []int{n}, Payload: payload}
		b, err := Append(nil, f)
		if err != nil {
			t.Fatal(err)
		}
		for name, r := range map[string]io.Reader{
			"whole": bytes.NewReader(b), "half": iotest.HalfReader(bytes.NewReader(b)), "data+EOF": iotest.DataErrReader(bytes.NewReader(b)),
		} {
			got, err := Read(r, 0)
			if err != nil {
				t.Fatalf("%d bytes, %s: %v", n, name, err)
			}
			if !bytes.Equal(got.Payload, payload) || !reflect.DeepEqual(got.Shape, f.Shape) {
				t.Fatalf("%d bytes, %s: payload or shape differs", n, name)
			}
		}
		if n > 0 {
			if _, err := Read(bytes.NewReader(b[:len(b)-1]), 0); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("%d bytes, one missing: %v, want io.ErrUnexpectedEOF", n, err)
			}
		}
	}
}
