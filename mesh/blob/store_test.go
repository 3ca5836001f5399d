package blob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

func testBlobData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func openTestStore(t *testing.T, chunk int) *Store {
	t.Helper()
	s, err := OpenStore(t.TempDir(), chunk)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStorePublishOpen(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{0, 1, 4096, 4097, 50000} {
		s := openTestStore(t, 4096)
		data := testBlobData(size, uint64(size))
		id, err := s.Publish(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("size %d: %v", size, err)
		}
		if want := IDOf(data, 4096); id != want {
			t.Fatalf("size %d: id %s, IDOf says %s", size, id, want)
		}
		if !s.Has(id) || !ValidID(id) {
			t.Fatalf("size %d: published blob %q missing or malformed ID", size, id)
		}
		again, err := s.Publish(ctx, bytes.NewReader(data))
		if err != nil || again != id {
			t.Fatalf("size %d: republish gave %s, %v", size, again, err)
		}
		f, err := s.Open(id)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if !bytes.Equal(got, data) {
			t.Fatalf("size %d: read back %d bytes that differ", size, len(got))
		}
		m, err := s.Manifest(id)
		if err != nil || m.Size != int64(size) || len(m.Chunks) != (size+4095)/4096 {
			t.Fatalf("size %d: manifest %+v, %v", size, m, err)
		}
		// A fresh store over the same directory finds it on disk.
		s2, _ := OpenStore(s.Dir(), 0)
		if !s2.Has(id) {
			t.Fatalf("size %d: reopened store lost the blob", size)
		}
		left, _ := os.ReadDir(s.Dir())
		if len(left) != 2 {
			t.Errorf("size %d: store holds %d files, want data and manifest only", size, len(left))
		}
	}
}

func TestStoreRefusesCorruptChunk(t *testing.T) {
	s := openTestStore(t, 1024)
	data := testBlobData(4000, 1)
	id, err := s.Publish(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	data[1500] ^= 1
	if err := os.WriteFile(s.dataPath(id), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.readChunk(id, 0); err != nil {
		t.Errorf("intact chunk 0: %v", err)
	}
	if _, err := s.readChunk(id, 1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("corrupt chunk 1: got %v, want ErrCorrupt", err)
	}
	if _, err := s.readChunk(id, 4); !errors.Is(err, ErrNotFound) {
		t.Errorf("chunk past the end: got %v, want ErrNotFound", err)
	}
	if _, err := s.ReadVerified(id); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ReadVerified of a corrupt blob: got %v, want ErrCorrupt", err)
	}
	if err := s.Remove(id); err != nil || s.Has(id) {
		t.Fatalf("Remove: %v (still there: %v)", err, s.Has(id))
	}
	if _, err := s.ReadVerified(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadVerified of a removed blob: got %v, want ErrNotFound", err)
	}
	data[1500] ^= 1
	if id2, err := s.Publish(context.Background(), bytes.NewReader(data)); err != nil || id2 != id {
		t.Fatalf("republish: %v (%s, want %s)", err, id2, id)
	}
	if b, err := s.ReadVerified(id); err != nil || !bytes.Equal(b, data) {
		t.Errorf("ReadVerified of the republished blob: %v", err)
	}
	if s.Has("0000") || s.Has(IDOf([]byte("other"), 0)) {
		t.Errorf("Has reports blobs that are not there")
	}
}

func TestManifestRejects(t *testing.T) {
	m := &Manifest{Size: 10, ChunkSize: 4, Chunks: make([][32]byte, 3)}
	good := m.Encode()
	if _, err := DecodeManifest(good); err != nil {
		t.Fatalf("valid manifest: %v", err)
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"magic":       func(b []byte) []byte { b[0] = 'X'; return b },
		"reserved":    func(b []byte) []byte { b[6] = 1; return b },
		"chunk count": func(b []byte) []byte { b[20] = 2; return b[:len(b)-32] },
		"zero chunk":  func(b []byte) []byte { b[16], b[17], b[18], b[19] = 0, 0, 0, 0; return b },
		"trailing":    func(b []byte) []byte { return append(b, 0) },
		"short":       func(b []byte) []byte { return b[:40] },
	} {
		if _, err := DecodeManifest(mutate(bytes.Clone(good))); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: got %v, want ErrManifest", name, err)
		}
	}
}

func FuzzRequest(f *testing.F) {
	var id [32]byte
	id[3] = 7
	f.Add(appendBlobRequest(nil, blobRequest{kind: blobReqManifest, id: id}))
	f.Add(appendBlobRequest(nil, blobRequest{kind: blobReqChunk, id: id, index: 12}))
	f.Add([]byte{3})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := readBlobRequest(bytes.NewReader(b))
		if err != nil {
			return
		}
		if enc := appendBlobRequest(nil, r); !bytes.Equal(enc, b[:blobRequestLen]) {
			t.Fatalf("request %x re-encodes as %x", b[:blobRequestLen], enc)
		}
	})
}

func FuzzResponse(f *testing.F) {
	var ok, none bytes.Buffer
	_ = writeBlobResponse(&ok, blobStatusOK, []byte("chunk bytes"))
	_ = writeBlobResponse(&none, blobStatusNone, []byte("not here"))
	f.Add(ok.Bytes(), 64)
	f.Add(none.Bytes(), 64)
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, 16)
	f.Fuzz(func(t *testing.T, b []byte, maxLen int) {
		maxLen = max(0, min(maxLen, 1<<16))
		payload, err := readBlobResponse(bytes.NewReader(b), maxLen)
		if err == nil && len(payload) > maxLen {
			t.Fatalf("payload of %d bytes past the bound %d", len(payload), maxLen)
		}
	})
}

func FuzzManifest(f *testing.F) {
	f.Add((&Manifest{Size: 10, ChunkSize: 4, Chunks: make([][32]byte, 3)}).Encode())
	f.Add((&Manifest{ChunkSize: 1 << 20}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(m.Encode(), b) {
			t.Fatalf("manifest does not re-encode to its input")
		}
		last := len(m.Chunks) - 1
		if last >= 0 && (m.ChunkLen(last) <= 0 || m.ChunkLen(last) > m.ChunkSize) {
			t.Fatalf("last chunk length %d out of (0, %d]", m.ChunkLen(last), m.ChunkSize)
		}
	})
}
