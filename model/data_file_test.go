package model

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStreamedBinMatchesInMemory: a .bin pair read on demand gives the sampler exactly the
// batches the same tokens held in memory give, so .bin runs keep their losses.
func TestStreamedBinMatchesInMemory(t *testing.T) {
	dir := t.TempDir()
	toks := make([]uint16, 5000)
	for i := range toks {
		toks[i] = uint16((i * 7919) % 1000)
	}
	b := make([]byte, 0, 2*len(toks))
	for _, v := range toks {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	for _, name := range []string{"train.bin", "val.bin"} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	streamed, err := LoadDataset(dir, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if streamed.Train.file == nil {
		t.Fatal("the .bin pair was read into memory")
	}
	held := &Dataset{Train: Uint16Tokens(toks), Val: Uint16Tokens(toks), Vocab: 1000}
	const B, T = 4, 32
	s1, s2 := Sampler{Train: streamed.Train, Batch: B, Context: T, Seed: 7}, Sampler{Train: held.Train, Batch: B, Context: T, Seed: 7}
	for step := range 20 {
		m1, err1 := s1.MicroBatch(step, 0, 1)
		m2, err2 := s2.MicroBatch(step, 0, 1)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !equalInt32(m1.Inputs, m2.Inputs) || !equalInt32(m1.Targets, m2.Targets) {
			t.Fatal("streamed and in-memory tokens gave different batches")
		}
	}
	w1, w2 := make([]int32, 100), make([]int32, 100)
	if err := errors.Join(streamed.Val.Window(w1, streamed.Val.Len()-100), held.Val.Window(w2, held.Val.Len()-100)); err != nil {
		t.Fatal(err)
	}
	if !equalInt32(w1, w2) {
		t.Fatal("the last validation window differs")
	}
}

// TestTruncatedFileIsAnErrorNamingIt: a .bin file cut short under a running job makes the
// on-demand read fail with an error that names the file (ErrBadData), instead of a panic;
// windows still inside the file go on reading.
func TestTruncatedFileIsAnErrorNamingIt(t *testing.T) {
	dir := t.TempDir()
	b := make([]byte, 2*4000)
	for i := range 4000 {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(i%500))
	}
	for _, name := range []string{"train.bin", "val.bin"} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ds, err := LoadDataset(dir, 500)
	if err != nil {
		t.Fatal(err)
	}
	train := filepath.Join(dir, "train.bin")
	if err := os.Truncate(train, 2*1000); err != nil {
		t.Fatal(err)
	}
	w := make([]int32, 16)
	if err := ds.Train.Window(w, 10); err != nil || w[0] != 10 {
		t.Fatalf("a window before the cut: %v, %v", w[0], err)
	}
	err = ds.Train.Window(w, 3000)
	if !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), train) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("window past the cut: got %v, want ErrBadData naming %s", err, train)
	}
	// The sampler draws offsets over the whole original length: some row of some step
	// falls past the cut and fails the micro-batch, with the same error.
	s := Sampler{Train: ds.Train, Batch: 8, Context: 32, Seed: 1}
	for step := range 50 {
		if _, err = s.MicroBatch(step, 0, 1); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), train) {
		t.Fatalf("sampler over a truncated file: got %v, want ErrBadData naming %s", err, train)
	}
	if err := os.Truncate(filepath.Join(dir, "val.bin"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ValBatch(ds.Val, ValOffsets(ds.Val, 32, 4), 32); !errors.Is(err, ErrBadData) || !strings.Contains(err.Error(), "val.bin") {
		t.Fatalf("validation over an emptied file: got %v, want ErrBadData naming val.bin", err)
	}
}
