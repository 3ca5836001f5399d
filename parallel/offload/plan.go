package offload

import (
	"fmt"
)

// Kinds of training state, each packed into its own chunks with the same layout: chunk k
// of every kind holds the same parameters, so one optimizer op pins four chunks.
const (
	Value = iota
	Grad
	ExpAvg
	ExpAvgSq
	Kinds
)

// Layout packs a layer list's parameters, in layer order, into chunks of ChunkFloats
// floats; no tensor is split (a chunk is at least the largest tensor, as in PatrickStar).
type Layout struct {
	ChunkFloats int
	// PerKind is the number of chunks of one kind; chunk k of kind d has id d·PerKind + k.
	PerKind int
	// Chunk and Off place parameter i: chunk Chunk[i] (of every kind), floats [Off[i], Off[i]+size).
	Chunk, Off []int
	// LayerChunks lists, per layer, the chunks (of one kind) holding its parameters.
	LayerChunks [][]int
}

// tensorAlign aligns every tensor in a chunk to 64 bytes (16 floats).
const tensorAlign = 16

// Pack lays out parameters of the given sizes (floats), grouped by layer, into chunks of
// chunkFloats. It fails if a tensor is larger than a chunk.
func Pack(layerSizes [][]int, chunkFloats int) (Layout, error) {
	lay := Layout{ChunkFloats: chunkFloats}
	k, fill := 0, 0
	for _, sizes := range layerSizes {
		var chunks []int
		for _, n := range sizes {
			if n > chunkFloats {
				return Layout{}, fmt.Errorf("a tensor of %d floats does not fit a chunk of %d", n, chunkFloats)
			}
			if fill+n > chunkFloats {
				k, fill = k+1, 0
			}
			lay.Chunk, lay.Off = append(lay.Chunk, k), append(lay.Off, fill)
			if len(chunks) == 0 || chunks[len(chunks)-1] != k {
				chunks = append(chunks, k)
			}
			fill = (fill + n + tensorAlign - 1) / tensorAlign * tensorAlign
		}
		lay.LayerChunks = append(lay.LayerChunks, chunks)
	}
	if len(lay.Chunk) > 0 {
		lay.PerKind = k + 1
	}
	return lay, nil
}

// MaxPinned is the most chunks one op pins: a layer's weights and gradients (backward),
// or one chunk of each kind (the optimizer).
func (l Layout) MaxPinned() int {
	n := Kinds
	for _, cs := range l.LayerChunks {
		n = max(n, 2*len(cs))
	}
	return n
}

// Choice is a chunk size for a budget: the layout and how many resident buffers fit.
type Choice struct {
	Layout     Layout
	ChunkBytes int64
	Buffers    int
}

// Choose picks the chunk size for a memory budget of resident training state: among
// sizes from the largest tensor to four times it (rounded to Align), those whose buffers
// (budget ÷ size) hold two ops' chunks (one in use, the next prefetched), else one op's,
// and among them the one wasting the least space in chunks. chunkBytes > 0 fixes the
// size instead. The error says the least budget that works.
func Choose(layerSizes [][]int, budget, chunkBytes int64) (Choice, error) {
	largest := 0
	for _, sizes := range layerSizes {
		for _, n := range sizes {
			largest = max(largest, n)
		}
	}
	base := roundUp(int64(largest)*4, Align)
	sizes := []int64{chunkBytes}
	if chunkBytes <= 0 {
		sizes = nil
		for _, f := range []float64{1, 1.25, 1.5, 2, 2.5, 3, 4} {
			sizes = append(sizes, roundUp(int64(float64(base)*f), Align))
		}
	} else if chunkBytes%Align != 0 || chunkBytes < base {
		return Choice{}, fmt.Errorf("chunk size %d must be a multiple of %d and at least the largest tensor (%d bytes)", chunkBytes, Align, base)
	}
	var best Choice
	bestRoom, least := -1, int64(-1)
	for _, c := range sizes {
		lay, err := Pack(layerSizes, int(c/4))
		if err != nil {
			return Choice{}, err
		}
		need := int64(lay.MaxPinned()) * c
		if least < 0 || need < least {
			least = need
		}
		buffers := min(budget/c, int64(Kinds*lay.PerKind))
		room := 0
		switch {
		case buffers >= int64(2*lay.MaxPinned()):
			room = 2
		case buffers >= int64(lay.MaxPinned()):
			room = 1
		default:
			continue
		}
		waste := int64(lay.PerKind) * c
		if room > bestRoom || (room == bestRoom && waste < int64(best.Layout.PerKind)*best.ChunkBytes) {
			best, bestRoom = Choice{Layout: lay, ChunkBytes: c, Buffers: int(buffers)}, room
		}
	}
	if bestRoom < 0 {
		return Choice{}, fmt.Errorf("%s is below the %s this model needs resident at once (a layer's weights and gradients)", FormatBytes(budget), FormatBytes(least))
	}
	return best, nil
}

func roundUp(x, m int64) int64 { return (x + m - 1) / m * m }

// FormatBytes writes n in binary units (KiB, MiB, GiB) with one decimal.
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
