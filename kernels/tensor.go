package kernels

import "fmt"

// Tensor is a dense float32 array in row-major order. Data has exactly Size() elements.
type Tensor struct {
	Shape []int
	Data  []float32
}

// NewTensor returns a zero-filled tensor of the given shape. It panics on a negative
// dimension, as make does.
func NewTensor(shape ...int) *Tensor {
	return &Tensor{Shape: append([]int(nil), shape...), Data: make([]float32, ShapeSize(shape))}
}

// ShapeSize is the number of elements of a tensor of the given shape (1 for a scalar).
func ShapeSize(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("kernels: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// Size is the number of elements.
func (t *Tensor) Size() int { return len(t.Data) }

// SameShape reports whether t has exactly the given shape.
func (t *Tensor) SameShape(shape []int) bool {
	if len(t.Shape) != len(shape) {
		return false
	}
	for i := range shape {
		if t.Shape[i] != shape[i] {
			return false
		}
	}
	return true
}

// Clone returns a deep copy.
func (t *Tensor) Clone() *Tensor {
	return &Tensor{Shape: append([]int(nil), t.Shape...), Data: append([]float32(nil), t.Data...)}
}

// Zero sets every element to 0.
func (t *Tensor) Zero() { clear(t.Data) }
