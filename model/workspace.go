package model

import (
	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cpu"
)

// slabFloats is the size of one workspace slab (4 MiB of float32).
const slabFloats = 1 << 20

// cpuBackend is the backend of a Workspace whose Backend is nil.
var cpuBackend device.Backend = cpu.New()

// Workspace hands out buffers for one training step and takes them all back at Reset, so a
// steady-state step allocates nothing. A step's allocation pattern repeats, so after the
// first step the slabs are reused. It is not safe for concurrent use: each stage
// (goroutine) has its own.
//
// The workspace also chooses the device: its Backend computes every layer that runs in it,
// and its slabs are that backend's memory.
type Workspace struct {
	// Backend computes the layers run with this workspace and allocates its slabs; nil is
	// the CPU backend (device/cpu). Set it before the first allocation and do not change
	// it afterwards.
	Backend device.Backend

	slabs []device.Tensor
	cur   int   // slab being filled
	off   int   // next free element in slabs[cur]
	used  int64 // floats handed out since Reset
	peak  int64 // the most floats handed out at once since ResetPeak
}

// backend is the workspace's Backend, the CPU's when none is set.
func (w *Workspace) backend() device.Backend {
	if w.Backend == nil {
		return cpuBackend
	}
	return w.Backend
}

// Alloc returns a zeroed slice of n floats valid until the next Reset. Like AllocDirty, it
// is for host backends (the CPU's) only.
func (w *Workspace) Alloc(n int) []float32 {
	s := w.AllocDirty(n)
	clear(s)
	return s
}

// AllocDirty is Alloc without the zeroing, for buffers the caller overwrites entirely. It
// returns nil when the workspace's backend keeps its tensors in device memory: use
// AllocTensor there.
func (w *Workspace) AllocDirty(n int) []float32 { return w.AllocTensor(n).Host() }

// AllocTensor returns a tensor of n float32 elements in the backend's memory, valid until
// the next Reset; its contents are whatever the slab held (the caller overwrites it).
func (w *Workspace) AllocTensor(n int) device.Tensor {
	w.used += int64(n)
	w.peak = max(w.peak, w.used)
	for w.cur < len(w.slabs) {
		slab := w.slabs[w.cur]
		if w.off+n <= slab.Len() {
			s := slab.Slice(w.off, w.off+n)
			w.off += n
			return s
		}
		w.cur++
		w.off = 0
	}
	w.slabs = append(w.slabs, w.backend().Alloc(max(n, slabFloats), device.F32))
	w.cur = len(w.slabs) - 1
	w.off = n
	return w.slabs[w.cur].Slice(0, n)
}

// allocZero is AllocTensor with the elements set to 0.
func (w *Workspace) allocZero(n int) device.Tensor {
	t := w.AllocTensor(n)
	w.backend().Zero(t)
	return t
}

// input is a layer's host input x as a tensor of the backend: x itself on a host backend,
// a copy in the workspace on a device backend. (Layers exchange host slices until the
// Layer interface carries device tensors; see docs/engine.md.)
func (w *Workspace) input(x []float32) device.Tensor {
	be := w.backend()
	if be.Device().IsHost() {
		return device.Host(x)
	}
	t := w.AllocTensor(len(x))
	be.CopyFromHost(t, x)
	return t
}

// output is a layer's result t as a host slice: t's own elements on a host backend, a
// copy on a device backend.
func (w *Workspace) output(t device.Tensor) []float32 {
	if h := t.Host(); h != nil || t.IsEmpty() {
		return h
	}
	h := make([]float32, t.Len())
	w.backend().CopyToHost(h, t)
	return h
}

// keep returns a copy in w of the host slice y, which another workspace (a scratch) will
// reuse. On a device backend y is already the host's own copy (see output) and is returned
// as it is.
func (w *Workspace) keep(y []float32) []float32 {
	if !w.backend().Device().IsHost() {
		return y
	}
	out := w.AllocDirty(len(y))
	copy(out, y)
	return out
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
		n += int64(s.Len()) * 4
	}
	return n
}
