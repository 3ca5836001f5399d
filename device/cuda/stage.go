//go:build cgo && linux && (amd64 || arm64)

package cuda

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"

	"github.com/meshnode/meshnode/device"
)

// stageArena is device memory for one operation's host operands (parameters still in
// host memory, token ids, per-row losses): bump-allocated during the operation, reset
// after it. Reuse is safe without waiting because every copy and kernel runs on the one
// stream, in order. A chunk is never moved, so an operation's earlier staged pointers stay
// valid when a later operand needs a new chunk.
type stageArena struct {
	chunks []stageChunk
	cur    int
}

type stageChunk struct {
	ptr, size, used uint64
}

// minStageChunk is the smallest staging chunk (64 MiB).
const minStageChunk = 64 << 20

// alloc returns bytes of staging memory (256-byte aligned), 0 after a failure.
func (s *stageArena) alloc(b *Backend, bytes uint64) uint64 {
	bytes = (bytes + 255) &^ 255
	for ; s.cur < len(s.chunks); s.cur++ {
		c := &s.chunks[s.cur]
		if c.used+bytes <= c.size {
			p := c.ptr + c.used
			c.used += bytes
			return p
		}
	}
	c := stageChunk{size: max(bytes, minStageChunk)}
	if err := b.drv.check("cuMemAlloc (staging)", b.drv.memAlloc(&c.ptr, c.size)); err != nil {
		b.fail(fmt.Errorf("%w (staging %d bytes of host operands)", err, c.size))
		return 0
	}
	c.used = bytes
	s.chunks = append(s.chunks, c)
	s.cur = len(s.chunks) - 1
	return c.ptr
}

func (s *stageArena) reset() {
	for i := range s.chunks {
		s.chunks[i].used = 0
	}
	s.cur = 0
}

// writeback is a host output of the running operation: bytes at src go to dst after it.
type writeback struct {
	dst   unsafe.Pointer
	src   uint64
	bytes uint64
}

// stageHost copies bytes of host memory at p to staging memory and returns its address.
func (b *Backend) stageHost(p unsafe.Pointer, bytes uint64) uint64 {
	d := b.stage.alloc(b, bytes)
	if d != 0 && bytes > 0 {
		b.fail(b.drv.check("cuMemcpyHtoDAsync", b.drv.memcpyHtoDAsync(d, p, bytes, b.stream)))
	}
	return d
}

// in is the device address of operand t (n elements needed): its own for a device tensor,
// a staged copy for a host tensor, 0 for the empty tensor.
func (b *Backend) in(t device.Tensor, n int) uint64 {
	h := t.Host()
	if h == nil {
		return b.devPtr(t, n)
	}
	if len(h) < n {
		panic(fmt.Sprintf("device/cuda: a tensor of %d elements where %d are needed", len(h), n))
	}
	return b.stageHost(unsafe.Pointer(&h[0]), uint64(len(h))*4)
}

// out is in for an output: a host tensor is staged with its contents (outputs that
// accumulate read them) and copied back when the operation ends.
func (b *Backend) out(t device.Tensor, n int) uint64 {
	p := b.in(t, n)
	if h := t.Host(); h != nil && p != 0 {
		b.writeback = append(b.writeback, writeback{dst: unsafe.Pointer(&h[0]), src: p, bytes: uint64(len(h)) * 4})
	}
	return p
}

// hostOut registers a host result of bytes at dst (losses), staged in device memory.
func (b *Backend) hostOut(dst unsafe.Pointer, bytes uint64) uint64 {
	p := b.stage.alloc(b, bytes)
	if p != 0 {
		b.writeback = append(b.writeback, writeback{dst: dst, src: p, bytes: bytes})
	}
	return p
}

// flushWriteback copies the operation's host outputs back and waits for them.
func (b *Backend) flushWriteback() {
	if len(b.writeback) == 0 {
		return
	}
	for _, w := range b.writeback {
		if b.err == nil {
			b.fail(b.drv.check("cuMemcpyDtoHAsync", b.drv.memcpyDtoHAsync(w.dst, w.src, w.bytes, b.stream)))
		}
	}
	b.fail(b.drv.check("cuStreamSynchronize", b.drv.streamSynchronize(b.stream)))
	b.writeback = b.writeback[:0]
}

// int32s stages host int32s (token ids, targets).
func (b *Backend) int32s(x []int32) uint64 {
	if len(x) == 0 {
		return 0
	}
	return b.stageHost(unsafe.Pointer(&x[0]), uint64(len(x))*4)
}

// launch runs kernel fn on a grid of gx×gy blocks of bx×by threads. Each argument is
// passed as the kernel's parameter of the same size: uint64 (a device pointer), int
// (C int), int64 (C long) or float32.
func (b *Backend) launch(fn string, gx, gy, bx, by int, args ...any) {
	if b.err != nil || gx == 0 || gy == 0 {
		return
	}
	f, ok := b.fns[fn]
	if !ok {
		panic("device/cuda: no kernel " + fn)
	}
	if err := checkArgs(fn, b.sigs[fn], args); err != nil {
		panic(err) // a launch that does not match its kernel is a programming error
	}
	slots := make([]uint64, len(args))
	params := make([]unsafe.Pointer, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case uint64:
			slots[i] = v
		case int:
			slots[i] = uint64(uint32(int32(v)))
		case int64:
			slots[i] = uint64(v)
		case float32:
			slots[i] = uint64(math.Float32bits(v))
		default:
			panic(fmt.Sprintf("device/cuda: kernel argument of type %T", a))
		}
		params[i] = unsafe.Pointer(&slots[i])
	}
	r := b.drv.launchKernel(f, uint32(gx), uint32(gy), 1, uint32(bx), uint32(by), 1, 0, b.stream, unsafe.Pointer(&params[0]), nil)
	runtime.KeepAlive(slots)
	b.fail(b.drv.check("cuLaunchKernel "+fn, r))
}

// launch1D runs fn with one thread per element of n, 256 to a block.
func (b *Backend) launch1D(fn string, n int, args ...any) {
	b.launch(fn, (n+255)/256, 1, 256, 1, args...)
}
