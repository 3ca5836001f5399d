package model

import (
	"encoding/binary"
	"os"
	"path/filepath"
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
		m1, m2 := s1.MicroBatch(step, 0, 1), s2.MicroBatch(step, 0, 1)
		if !equalInt32(m1.Inputs, m2.Inputs) || !equalInt32(m1.Targets, m2.Targets) {
			t.Fatal("streamed and in-memory tokens gave different batches")
		}
	}
	w1, w2 := make([]int32, 100), make([]int32, 100)
	streamed.Val.Window(w1, streamed.Val.Len()-100)
	held.Val.Window(w2, held.Val.Len()-100)
	if !equalInt32(w1, w2) {
		t.Fatal("the last validation window differs")
	}
}
