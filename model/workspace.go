package model

// slabFloats is the size of one workspace slab (4 MiB of float32).
const slabFloats = 1 << 20

// Workspace hands out float32 buffers for one training step and takes them all back at
// Reset, so a steady-state step allocates nothing. A step's allocation pattern repeats, so
// after the first step the slabs are reused. It is not safe for concurrent use: each stage
// (goroutine) has its own.
type Workspace struct {
	slabs [][]float32
	cur   int   // slab being filled
	off   int   // next free element in slabs[cur]
	used  int64 // floats handed out since Reset
	peak  int64 // the most floats handed out at once since ResetPeak
}

// Alloc returns a zeroed slice of n floats valid until the next Reset.
func (w *Workspace) Alloc(n int) []float32 {
	s := w.AllocDirty(n)
	clear(s)
	return s
}

// AllocDirty is Alloc without the zeroing, for buffers the caller overwrites entirely.
func (w *Workspace) AllocDirty(n int) []float32 {
	w.used += int64(n)
	w.peak = max(w.peak, w.used)
	for w.cur < len(w.slabs) {
		slab := w.slabs[w.cur]
		if w.off+n <= len(slab) {
			s := slab[w.off : w.off+n : w.off+n]
			w.off += n
			return s
		}
		w.cur++
		w.off = 0
	}
	w.slabs = append(w.slabs, make([]float32, max(n, slabFloats)))
	w.cur = len(w.slabs) - 1
	w.off = n
	return w.slabs[w.cur][:n:n]
}

// Reset makes every buffer handed out so far free for reuse.
func (w *Workspace) Reset() { w.cur, w.off, w.used = 0, 0, 0 }

// PeakBytes is the most memory the workspace's buffers have held at once since it was
// made or since ResetPeak: the bytes handed out between two Resets at their highest. A
// workspace frees nothing before Reset, so this is the activation memory a step needs.
func (w *Workspace) PeakBytes() int64 { return w.peak * 4 }

// ResetPeak starts a new PeakBytes measurement from what is handed out now.
func (w *Workspace) ResetPeak() { w.peak = w.used }

// Bytes is the memory the workspace holds.
func (w *Workspace) Bytes() int64 {
	var n int64
	for _, s := range w.slabs {
		n += int64(len(s)) * 4
	}
	return n
}
