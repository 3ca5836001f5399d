package model

// SplitMix64 is the sampler's hash (docs/gpt.md): splitmix64's finaliser over
// seed + (i+1)·0x9E3779B97F4A7C15 (mod 2⁶⁴).
func SplitMix64(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Sampler draws the training batches of docs/gpt.md: row r of step s starts at
// SplitMix64(seed, s·B + r) mod (len(train) − T − 1).
//
// Data-parallel replicas draw disjoint streams by giving each replica its own rows of a
// larger global batch: a replica with Batch rows starting at RowOffset reads rows
// [RowOffset, RowOffset+Batch) of a global batch of GlobalBatch rows, so that the replicas
// together see what one process would see with batch GlobalBatch. With equal shares,
// replica k of R has RowOffset k·B and GlobalBatch R·B.
type Sampler struct {
	Train Tokens
	// Batch is B, the rows of this replica's step; Context is T.
	Batch, Context int
	Seed           uint64
	// RowOffset and GlobalBatch place the replica's rows in the global batch; zero values
	// mean one replica (offset 0, global batch = Batch).
	RowOffset, GlobalBatch int
}

// Offset is the start of row r (0 ≤ r < Batch) of step s for this sampler's replica.
func (s Sampler) Offset(step, r int) int {
	g := s.GlobalBatch
	if g == 0 {
		g = s.Batch
	}
	global := uint64(step)*uint64(g) + uint64(s.RowOffset+r)
	span := uint64(s.Train.Len() - s.Context - 1)
	return int(SplitMix64(s.Seed, global) % span)
}

// MicroBatch returns micro-batch m of M of step s: rows [m·B/M, (m+1)·B/M). It fails only
// when tokens read on demand are no longer in their file (Tokens.Window).
func (s Sampler) MicroBatch(step, m, M int) (*Batch, error) {
	lo, hi := m*s.Batch/M, (m+1)*s.Batch/M
	T := s.Context
	mb := &Batch{B: hi - lo, T: T, Inputs: make([]int32, (hi-lo)*T), Targets: make([]int32, (hi-lo)*T)}
	for r := lo; r < hi; r++ {
		off := s.Offset(step, r)
		i := (r - lo) * T
		if err := windowPair(s.Train, mb.Inputs[i:i+T], mb.Targets[i:i+T], off); err != nil {
			return nil, err
		}
	}
	return mb, nil
}

// windowPair reads the window at off into inputs and its next-token targets.
func windowPair(t Tokens, inputs, targets []int32, off int) error {
	if err := t.Window(inputs, off); err != nil {
		return err
	}
	return t.Window(targets, off+1)
}

// ValOffsets are the K validation windows of docs/gpt.md: offset_k = ⌊k·(len − T − 1)/K⌋.
func ValOffsets(val Tokens, T, K int) []int {
	span := val.Len() - T - 1
	offs := make([]int, K)
	for k := range offs {
		offs[k] = int(int64(k) * int64(span) / int64(K))
	}
	return offs
}

// ValBatch builds the batch of windows offs (inputs and next-token targets); it fails as
// MicroBatch does.
func ValBatch(val Tokens, offs []int, T int) (*Batch, error) {
	mb := &Batch{B: len(offs), T: T, Inputs: make([]int32, len(offs)*T), Targets: make([]int32, len(offs)*T)}
	for i, off := range offs {
		if err := windowPair(val, mb.Inputs[i*T:(i+1)*T], mb.Targets[i*T:(i+1)*T], off); err != nil {
			return nil, err
		}
	}
	return mb, nil
}
