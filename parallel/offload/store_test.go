package offload

import (
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/kernels"
)

// testStore opens a store of chunks×(2 tensors of 500 floats per 4 KiB chunk) with buffers
// resident buffers and a schedule of ops pinning 1 to maxPin random chunks.
func testStore(t testing.TB, rng *rand.Rand, chunks, buffers, maxPin int) (*Store, [][]*kernels.Tensor) {
	t.Helper()
	var bindings [][]Binding
	var tensors [][]*kernels.Tensor
	for c := 0; c < chunks; c++ {
		a, b := &kernels.Tensor{Shape: []int{500}}, &kernels.Tensor{Shape: []int{20, 25}}
		bindings = append(bindings, []Binding{{Tensor: a, N: 500}, {Tensor: b, Off: 512, N: 500}})
		tensors = append(tensors, []*kernels.Tensor{a, b})
	}
	var ops []Op
	for i := 0; i < 3*chunks; i++ {
		perm := rng.Perm(chunks)[:1+rng.IntN(maxPin)]
		w := make([]bool, len(perm))
		for j := range w {
			w[j] = rng.IntN(2) == 0
		}
		op := Op{Chunks: perm, Writes: w}
		if rng.IntN(4) == 0 {
			op.Discard = perm[:1]
		}
		ops = append(ops, op)
	}
	s, err := Open(Config{Dir: t.TempDir(), ChunkBytes: Align, Buffers: buffers, Bindings: bindings, Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	return s, tensors
}

// checkStoreAgainstMirror runs a store's schedule (and some unscheduled pins and zeroing)
// against an in-memory mirror: what a pin binds is always what was last written.
func checkStoreAgainstMirror(t *testing.T, seed uint64, chunks, buffers, maxPin int) Stats {
	rng := rand.New(rand.NewPCG(seed, 7))
	s, tensors := testStore(t, rng, chunks, buffers, maxPin)
	defer s.Close()
	mirror := make([][]float32, chunks)
	for c := range mirror {
		mirror[c] = make([]float32, 1000)
	}
	check := func(c int, where string) {
		got := append(append([]float32(nil), tensors[c][0].Data...), tensors[c][1].Data...)
		for i, v := range got {
			if v != mirror[c][i] {
				t.Fatalf("seed %d %s: chunk %d float %d is %v, want %v", seed, where, c, i, v, mirror[c][i])
			}
		}
	}
	for step := 0; step < 3; step++ {
		s.BeginStep()
		for i, op := range s.ops {
			if err := s.Enter(i); err != nil {
				t.Fatal(err)
			}
			for j, c := range op.Chunks {
				check(c, "pin")
				if op.Writes[j] {
					x := float32(rng.NormFloat64())
					tensors[c][0].Data[rng.IntN(500)], tensors[c][1].Data[rng.IntN(500)] = x, -x
					mirror[c] = append(append(mirror[c][:0], tensors[c][0].Data...), tensors[c][1].Data...)
				}
			}
			s.Exit(i)
			for _, c := range op.Discard {
				clear(mirror[c])
			}
		}
		s.EndStep()
		cs := rng.Perm(chunks)[:min(buffers, chunks)]
		mustPin(t, s, cs, nil)
		for _, c := range cs {
			check(c, "unscheduled pin")
		}
		s.Unpin(cs)
		z := rng.Perm(chunks)[:1]
		s.Zero(z)
		clear(mirror[z[0]])
	}
	st := s.Stats()
	if st.ResidentPeakBytes > int64(buffers)*Align {
		t.Errorf("resident peak %d over %d buffers", st.ResidentPeakBytes, buffers)
	}
	return st
}

// TestStoreMatchesMirror: random schedules over more chunks than buffers read back what
// was written, zeros after a discard or Zero, and never hold more than the buffers.
func TestStoreMatchesMirror(t *testing.T) {
	var read, written int64
	for seed := uint64(0); seed < 20; seed++ {
		st := checkStoreAgainstMirror(t, seed, 3+int(seed%9), 2+int(seed%3), 2)
		read, written = read+st.BytesRead, written+st.BytesWritten
	}
	if read == 0 || written == 0 {
		t.Errorf("the schedules moved nothing through the file: read %d, written %d", read, written)
	}
}

// FuzzStore is TestStoreMatchesMirror over any seed and shape.
func FuzzStore(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(2))
	f.Add(uint64(2), uint8(12), uint8(4))
	f.Fuzz(func(t *testing.T, seed uint64, chunks, buffers uint8) {
		n, b := 1+int(chunks%16), 1+int(buffers%6)
		checkStoreAgainstMirror(t, seed, n, b, min(b, n, 3))
	})
}

// TestStoreFileIsUnlinked: the store leaves nothing in its directory, even while open.
func TestStoreFileIsUnlinked(t *testing.T) {
	s, _ := testStore(t, rand.New(rand.NewPCG(1, 1)), 4, 2, 2)
	defer s.Close()
	entries, err := os.ReadDir(s.file.Name()[:strings.LastIndex(s.file.Name(), "/")])
	if err != nil || len(entries) != 0 {
		t.Errorf("directory holds %v (%v)", entries, err)
	}
}

// TestOpenRejects: no buffer, an op pinning more chunks than buffers, a binding outside
// its chunk, a misaligned chunk size, and a missing directory are errors.
func TestOpenRejects(t *testing.T) {
	tensor := &kernels.Tensor{Shape: []int{10}}
	one := [][]Binding{{{Tensor: tensor, N: 10}}}
	two := [][]Binding{one[0], {{Tensor: &kernels.Tensor{Shape: []int{10}}, N: 10}}}
	bad := map[string]Config{
		"no buffer":     {Dir: t.TempDir(), ChunkBytes: Align, Buffers: 0, Bindings: one},
		"op too large":  {Dir: t.TempDir(), ChunkBytes: Align, Buffers: 1, Bindings: two, Ops: []Op{{Chunks: []int{0, 1}, Writes: []bool{false, false}}}},
		"outside chunk": {Dir: t.TempDir(), ChunkBytes: Align, Buffers: 1, Bindings: [][]Binding{{{Tensor: tensor, Off: 1020, N: 10}}}},
		"misaligned":    {Dir: t.TempDir(), ChunkBytes: 1000, Buffers: 1, Bindings: one},
		"no directory":  {Dir: t.TempDir() + "/missing", ChunkBytes: Align, Buffers: 1, Bindings: one},
		"unknown chunk": {Dir: t.TempDir(), ChunkBytes: Align, Buffers: 1, Bindings: one, Ops: []Op{{Chunks: []int{3}, Writes: []bool{false}}}},
	}
	for name, cfg := range bad {
		if s, err := Open(cfg); err == nil {
			s.Close()
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestChooseBudget: a budget below one layer's weights and gradients is an error that
// says the least budget; a tight budget still gets one op's chunks; a large one room for
// prefetching; chunks are never smaller than the largest tensor.
func TestChooseBudget(t *testing.T) {
	layers := [][]int{{4096, 100}, {3000, 3000, 10}, {8192}}
	if _, err := Choose(layers, 4*Align, 0); err == nil || !strings.Contains(err.Error(), "needs resident at once") {
		t.Errorf("budget below one layer: %v", err)
	}
	c, err := Choose(layers, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.ChunkBytes < 8192*4 || int64(c.Buffers)*c.ChunkBytes > 1<<20 || c.Buffers < 2*c.Layout.MaxPinned() {
		t.Errorf("choice %+v", c)
	}
	if _, err := Choose(layers, 1<<20, 1000); err == nil {
		t.Error("a misaligned chunk size was accepted")
	}
	for i, n := range []int{4096, 100, 3000, 3000, 10, 8192} {
		if c.Layout.Off[i]+n > c.Layout.ChunkFloats {
			t.Errorf("tensor %d at %d+%d overflows its chunk of %d", i, c.Layout.Off[i], n, c.Layout.ChunkFloats)
		}
	}
}

// TestIOErrorIsReturned: once the file fails, pinning a chunk that must be read returns
// an *IOError, pins nothing, and Err reports it.
func TestIOErrorIsReturned(t *testing.T) {
	a, b := &kernels.Tensor{Shape: []int{4}}, &kernels.Tensor{Shape: []int{4}}
	s, err := Open(Config{Dir: t.TempDir(), ChunkBytes: Align, Buffers: 1,
		Bindings: [][]Binding{{{Tensor: a, N: 4}}, {{Tensor: b, N: 4}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustPin(t, s, []int{0}, []bool{true})
	a.Data[0] = 1
	s.Unpin([]int{0})
	mustPin(t, s, []int{1}, nil) // evicts chunk 0, written back
	s.Unpin([]int{1})
	s.file.Close()
	err = s.Pin([]int{0}, nil)
	var ioErr *IOError
	if !errors.As(err, &ioErr) || s.Err() == nil {
		t.Fatalf("pin after the file failed: %v, Err %v", err, s.Err())
	}
	if s.chunks[0].pins != 0 {
		t.Errorf("chunk 0 left with %d pins after a failed pin", s.chunks[0].pins)
	}
}

func mustPin(t *testing.T, s *Store, chunks []int, writes []bool) {
	t.Helper()
	if err := s.Pin(chunks, writes); err != nil {
		t.Fatal(err)
	}
}
