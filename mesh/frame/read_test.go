package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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

// BenchmarkRead reads frames of several sizes from memory: "grow" is Read (the payload
// buffer grows as bytes arrive), "upfront" allocates the announced payload at once as Read
// did before (and checks the CRC as Read does): the difference is what the growth costs
// an honest frame.
//
//	go test ./mesh/frame -run '^$' -bench Read -count 5
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20, 64 << 20} {
		wire, err := Append(nil, &Frame{Kind: KindReduce, DType: DTypeU8, Shape: []int{size}, Payload: make([]byte, size)})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("grow/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if _, err := Read(bytes.NewReader(wire), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("upfront/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				r := bytes.NewReader(wire)
				h, err := ReadHeader(r, 0)
				if err != nil {
					b.Fatal(err)
				}
				payload := make([]byte, h.PayloadLen())
				if _, err := io.ReadFull(r, payload); err != nil {
					b.Fatal(err)
				}
				if crc32.Update(crc32.Checksum(h.raw[:52], castagnoli), castagnoli, payload) != binary.LittleEndian.Uint32(h.raw[52:]) {
					b.Fatal("crc")
				}
			}
		})
	}
}
