//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/meshnode/meshnode/device"
)

// memory is one cuMemAlloc allocation. When no tensor refers to it any more, a cleanup
// queues its address, and the backend frees it at the next Sync (after the stream has
// finished with it).
type memory struct {
	ptr   uint64
	bytes uint64
	dev   device.Device
}

func (m *memory) Device() device.Device { return m.dev }

// Alloc returns n zeroed elements of dtype (F32 or BF16) in device memory. A failed
// allocation is kept as the backend's error and gives a tensor that no operation touches.
func (b *Backend) Alloc(n int, dtype device.DType) device.Tensor {
	if dtype != device.F32 && dtype != device.BF16 {
		panic("device/cuda: no " + dtype.String() + " tensors")
	}
	bytes := (uint64(n)*uint64(dtype.Size()) + 3) &^ 3 // memset works in 32-bit words
	m := &memory{bytes: max(bytes, 4), dev: b.Device()}
	if b.enter() {
		defer b.leave()
		if r := b.drv.memAlloc(&m.ptr, m.bytes); r != 0 {
			var free, total uint64
			b.drv.memGetInfo(&free, &total)
			b.fail(fmt.Errorf("%w (allocating %d bytes, %d of %d free)", b.drv.check("cuMemAlloc", r), m.bytes, free, total))
		} else {
			b.fail(b.drv.check("cuMemsetD32Async", b.drv.memsetD32Async(m.ptr, 0, m.bytes/4, b.stream)))
			runtime.AddCleanup(m, b.release, m.ptr)
		}
	}
	return device.InMemory(m, 0, n, dtype)
}

// release queues ptr for cuMemFree at the next Sync; it runs on the cleanup goroutine.
func (b *Backend) release(ptr uint64) {
	b.freeMu.Lock()
	b.toFree = append(b.toFree, ptr)
	b.freeMu.Unlock()
}

// freePending frees the queued allocations; the stream must be idle.
func (b *Backend) freePending() {
	b.freeMu.Lock()
	q := b.toFree
	b.toFree = nil
	b.freeMu.Unlock()
	for _, p := range q {
		b.fail(b.drv.check("cuMemFree", b.drv.memFree(p)))
	}
}

// devPtr is the device address of element 0 of t, which must be in this backend's memory
// and hold at least n elements; the zero Tensor is the null pointer.
func (b *Backend) devPtr(t device.Tensor, n int) uint64 {
	if t.IsEmpty() {
		return 0
	}
	if t.Len() < n {
		panic(fmt.Sprintf("device/cuda: a tensor of %d elements where %d are needed", t.Len(), n))
	}
	mem, off := t.Memory()
	m, ok := mem.(*memory)
	if !ok || m.dev != b.Device() {
		panic(fmt.Sprintf("device/cuda: a tensor in %v memory given to the %v backend", t.Device(), b.Device()))
	}
	return m.ptr + uint64(off)*uint64(t.DType().Size())
}

// CopyFromHost copies src into dst.
func (b *Backend) CopyFromHost(dst device.Tensor, src []float32) {
	if dst.Len() != len(src) {
		panic("device/cuda: CopyFromHost between different lengths")
	}
	if h := dst.Host(); h != nil {
		copy(h, src)
		return
	}
	if len(src) == 0 || !b.enter() {
		return
	}
	defer b.leave()
	if dst.DType() == device.BF16 {
		tmp := b.stageHost(unsafe.Pointer(&src[0]), uint64(len(src))*4)
		b.launch1D("f32_to_bf16", len(src), b.devPtr(dst, len(src)), tmp, int64(len(src)))
		return
	}
	b.fail(b.drv.check("cuMemcpyHtoDAsync", b.drv.memcpyHtoDAsync(b.devPtr(dst, len(src)), unsafe.Pointer(&src[0]), uint64(len(src))*4, b.stream)))
}

// CopyToHost copies src into dst and waits for it.
func (b *Backend) CopyToHost(dst []float32, src device.Tensor) {
	if src.Len() != len(dst) {
		panic("device/cuda: CopyToHost between different lengths")
	}
	if h := src.Host(); h != nil {
		copy(dst, h)
		return
	}
	if len(dst) == 0 || !b.enter() {
		return
	}
	defer b.leave()
	p := b.devPtr(src, len(dst))
	if src.DType() == device.BF16 {
		tmp := b.stage.alloc(b, uint64(len(dst))*4)
		b.launch1D("bf16_to_f32", len(dst), tmp, p, int64(len(dst)))
		p = tmp
	}
	b.fail(b.drv.check("cuMemcpyDtoHAsync", b.drv.memcpyDtoHAsync(unsafe.Pointer(&dst[0]), p, uint64(len(dst))*4, b.stream)))
	b.fail(b.drv.check("cuStreamSynchronize", b.drv.streamSynchronize(b.stream)))
}

// Copy sets dst = src, converting between F32 and BF16 where their types differ.
func (b *Backend) Copy(dst, src device.Tensor) {
	n := dst.Len()
	if src.Len() != n {
		panic("device/cuda: Copy between different lengths")
	}
	if n == 0 || !b.enter() {
		return
	}
	defer b.leave()
	d, s := b.out(dst, n), b.in(src, n)
	switch {
	case dst.DType() == src.DType():
		b.fail(b.drv.check("cuMemcpyDtoDAsync", b.drv.memcpyDtoDAsync(d, s, uint64(n)*uint64(src.DType().Size()), b.stream)))
	case dst.DType() == device.BF16:
		b.launch1D("f32_to_bf16", n, d, s, int64(n))
	default:
		b.launch1D("bf16_to_f32", n, d, s, int64(n))
	}
}

// Zero sets every element of t to 0.
func (b *Backend) Zero(t device.Tensor) {
	if h := t.Host(); h != nil {
		clear(h)
		return
	}
	if t.IsEmpty() || !b.enter() {
		return
	}
	defer b.leave()
	bytes := uint64(t.Len()) * uint64(t.DType().Size())
	p := b.devPtr(t, t.Len())
	if bytes%4 != 0 || p%4 != 0 { // a bf16 view of odd length or offset
		panic("device/cuda: Zero of a bf16 view that is not 4-byte aligned")
	}
	b.fail(b.drv.check("cuMemsetD32Async", b.drv.memsetD32Async(p, 0, bytes/4, b.stream)))
}
