package model

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplitMix64MatchesSpec(t *testing.T) {
	// Values computed with the Python reference (bench/gpt_ref.py's splitmix64).
	cases := []struct{ seed, i, want uint64 }{
		{1, 0, 10451216379200822465},
		{1, 1, 13757245211066428519},
		{42, 12345, 13715259297002539991},
	}
	for _, c := range cases {
		if got := SplitMix64(c.seed, c.i); got != c.want {
			t.Errorf("SplitMix64(%d, %d) = %d, want %d", c.seed, c.i, got, c.want)
		}
	}
}

func TestSamplerRowsAndMicroBatches(t *testing.T) {
	data := []byte("abcdefghijklmnopqrstuvwxyz0123456789")
	s := Sampler{Train: ByteTokens(data), Batch: 4, Context: 5, Seed: 3}
	span := uint64(len(data) - 5 - 1)
	for r := 0; r < 4; r++ {
		want := int(SplitMix64(3, uint64(2*4+r)) % span)
		if got := s.Offset(2, r); got != want {
			t.Fatalf("offset of step 2 row %d = %d, want %d", r, got, want)
		}
	}
	mb, err := s.MicroBatch(2, 1, 2) // rows 2 and 3
	if err != nil {
		t.Fatal(err)
	}
	off := s.Offset(2, 3)
	if mb.B != 2 || mb.Inputs[5] != int32(data[off]) || mb.Targets[9] != int32(data[off+5]) {
		t.Fatalf("micro-batch 1 of 2 does not hold rows 2..3: %+v", mb)
	}
	// Replicas draw disjoint rows of one global batch.
	r0 := Sampler{Train: ByteTokens(data), Batch: 2, Context: 5, Seed: 3, RowOffset: 0, GlobalBatch: 4}
	r1 := Sampler{Train: ByteTokens(data), Batch: 2, Context: 5, Seed: 3, RowOffset: 2, GlobalBatch: 4}
	if r0.Offset(2, 1) != s.Offset(2, 1) || r1.Offset(2, 0) != s.Offset(2, 2) {
		t.Fatal("a replica must read rows [RowOffset, RowOffset+Batch) of the global batch")
	}
}

func TestValOffsets(t *testing.T) {
	offs := ValOffsets(ByteTokens(make([]byte, 100)), 10, 4)
	want := []int{0, 22, 44, 66} // ⌊k·89/4⌋
	for i := range want {
		if offs[i] != want[i] {
			t.Fatalf("offsets %v, want %v", offs, want)
		}
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGoStdCorpusFollowsSpec(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src")
	// 21 files so that one (k = 19) goes to validation; plus files that must be skipped.
	for i := 0; i < 21; i++ {
		writeFile(t, filepath.Join(src, "pkg", string(rune('a'+i))+".go"), []byte{byte('A' + i)})
	}
	writeFile(t, filepath.Join(src, "pkg", "x_test.go"), []byte("skip"))
	writeFile(t, filepath.Join(src, "pkg", "testdata", "t.go"), []byte("skip"))
	writeFile(t, filepath.Join(src, "vendor", "v.go"), []byte("skip"))
	writeFile(t, filepath.Join(src, "pkg", "notes.txt"), []byte("skip"))
	if err := os.Symlink(filepath.Join(src, "pkg", "a.go"), filepath.Join(src, "pkg", "zz.go")); err != nil {
		t.Fatal(err)
	}
	// "B.go" sorts before "pkg/..." bytewise (uppercase first).
	writeFile(t, filepath.Join(src, "B.go"), []byte("0"))
	train, val, err := GoStdCorpus(root)
	if err != nil {
		t.Fatal(err)
	}
	// Order: B.go, pkg/a.go … pkg/u.go; k = 19 is pkg/s.go (the 19th after B.go).
	wantVal := "S\n"
	if string(val) != wantVal {
		t.Fatalf("validation = %q, want %q", val, wantVal)
	}
	if !strings.HasPrefix(string(train), "0\nA\nB\n") || strings.Contains(string(train), "skip") || len(train) != 2*21 {
		t.Fatalf("training split %q", train)
	}
}

func TestLoadDatasetTextAndBin(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "corpus.txt")
	writeFile(t, text, bytes.Repeat([]byte("0123456789"), 10))
	ds, err := LoadDataset(text, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Train.Len() != 95 || ds.Val.Len() != 5 || ds.Vocab != 256 {
		t.Fatalf("text split %d/%d, vocab %d", ds.Train.Len(), ds.Val.Len(), ds.Vocab)
	}
	if err := ds.CheckContext(8); err == nil || !strings.Contains(err.Error(), "validation split has 5 tokens") {
		t.Fatalf("short validation split: %v", err)
	}

	bin := filepath.Join(dir, "tok")
	enc := func(ids ...uint16) []byte {
		b := make([]byte, 2*len(ids))
		for i, v := range ids {
			binary.LittleEndian.PutUint16(b[2*i:], v)
		}
		return b
	}
	writeFile(t, filepath.Join(bin, "train.bin"), enc(1, 2, 300, 4))
	writeFile(t, filepath.Join(bin, "val.bin"), enc(5, 6))
	ds, err = LoadDataset(bin, 301)
	if err != nil {
		t.Fatal(err)
	}
	w := make([]int32, 2)
	if err := ds.Train.Window(w, 1); err != nil {
		t.Fatal(err)
	}
	if w[0] != 2 || w[1] != 300 {
		t.Fatalf("bin window %v", w)
	}
	if _, err := LoadDataset(filepath.Join(bin, "train.bin"), 300); err == nil || !strings.Contains(err.Error(), "token id 300") {
		t.Fatalf("token beyond vocab: %v", err)
	}
	for name, src := range map[string]string{
		"missing":   filepath.Join(dir, "nope.txt"),
		"empty":     filepath.Join(dir, "empty.txt"),
		"odd bytes": filepath.Join(dir, "odd"),
	} {
		switch name {
		case "empty":
			writeFile(t, src, nil)
		case "odd bytes":
			writeFile(t, filepath.Join(src, "train.bin"), []byte{1, 2, 3})
			writeFile(t, filepath.Join(src, "val.bin"), []byte{1, 2})
		}
		if _, err := LoadDataset(src, 256); err == nil {
			t.Errorf("%s data accepted", name)
		}
	}
}
