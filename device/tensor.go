package device

import "fmt"

// DType is the element type of a tensor.
type DType uint8

const (
	// F32 is IEEE-754 binary32, the only type the CPU backend computes in and the type of
	// master weights, optimiser moments, norms and losses on every backend.
	F32 DType = iota
	// BF16 is bfloat16, reserved for device backends' activations and GEMM inputs
	// (issue 23's mixed precision). No backend implements it yet.
	BF16
)

// Size is the number of bytes one element takes.
func (d DType) Size() int {
	if d == BF16 {
		return 2
	}
	return 4
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Kind is the kind of device a backend computes on.
type Kind uint8

const (
	// CPU is host memory and the host's cores.
	CPU Kind = iota
	// CUDA is an NVIDIA GPU's memory and streams.
	CUDA
	// Emulated is device memory emulated in host memory, for tests: the host sees it only
	// through copies, as it would a GPU's (devicetest.Emulated).
	Emulated
)

func (k Kind) String() string {
	switch k {
	case CPU:
		return "cpu"
	case CUDA:
		return "cuda"
	case Emulated:
		return "emulated"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Device names where a backend keeps its tensors and runs its operations.
type Device struct {
	Kind Kind
	// Index is the device's ordinal among those of its kind (0 for the CPU).
	Index int
}

// IsHost reports whether the device's tensors are in host memory, so that Tensor.Host
// returns their elements without a copy.
func (d Device) IsHost() bool { return d.Kind == CPU }

func (d Device) String() string {
	if d.Kind == CPU {
		return "cpu"
	}
	return fmt.Sprintf("%s:%d", d.Kind, d.Index)
}

// Memory is a device backend's storage of one allocation (a device pointer and its
// size, say). Only the backend that made it looks inside; the rest of the engine passes it
// around inside Tensors.
type Memory interface {
	// Device is where the memory is.
	Device() Device
}

// Tensor is a view of Len elements of one DType, either a host float32 slice or a range of
// a backend's Memory. It is a small value: slicing and passing it copies no elements.
// The zero Tensor is empty and stands for "none" where an operation's output is optional.
//
// Shapes are the operations' arguments (rows, columns, heads), as in BLAS, so a view into a
// larger buffer (one head of a fused projection, one micro-batch's rows) needs no copy.
type Tensor struct {
	host  []float32 // the elements, when the tensor is in host memory
	mem   Memory    // the storage, when the tensor is in device memory
	off   int       // first element of the view in mem
	n     int
	dtype DType
}

// Host wraps host memory: a float32 tensor whose elements are x itself (no copy).
func Host(x []float32) Tensor { return Tensor{host: x, n: len(x), dtype: F32} }

// InMemory is the tensor of n elements of dtype starting at element off of a backend's
// mem. Only backends call it.
func InMemory(mem Memory, off, n int, dtype DType) Tensor {
	return Tensor{mem: mem, off: off, n: n, dtype: dtype}
}

// Len is the number of elements.
func (t Tensor) Len() int { return t.n }

// DType is the element type.
func (t Tensor) DType() DType { return t.dtype }

// IsEmpty reports whether the tensor has no elements (the zero Tensor, "none").
func (t Tensor) IsEmpty() bool { return t.n == 0 }

// Host returns the tensor's elements when it is a float32 tensor in host memory, and nil
// otherwise: a device tensor's elements reach the host only through its backend's
// CopyToHost.
func (t Tensor) Host() []float32 { return t.host }

// Memory returns a device tensor's storage and the offset of its first element (nil and
// 0 for a host tensor). Only backends call it.
func (t Tensor) Memory() (Memory, int) { return t.mem, t.off }

// Device is where the tensor's elements are.
func (t Tensor) Device() Device {
	if t.mem != nil {
		return t.mem.Device()
	}
	return Device{Kind: CPU}
}

// Slice is the view of elements [lo, hi) of t. It panics if the range is outside t.
func (t Tensor) Slice(lo, hi int) Tensor {
	if lo < 0 || hi < lo || hi > t.n {
		panic(fmt.Sprintf("device: slice [%d:%d] of a tensor of %d elements", lo, hi, t.n))
	}
	if t.mem == nil {
		return Tensor{host: t.host[lo:hi:hi], n: hi - lo, dtype: t.dtype}
	}
	return Tensor{mem: t.mem, off: t.off + lo, n: hi - lo, dtype: t.dtype}
}
