//go:build !amd64 || noasm

package kernels

func geluForwardSpan(y, x []float32)       { geluForwardGo(y, x) }
func geluBackwardSpan(dx, x, dy []float32) { geluBackwardGo(dx, x, dy) }
func expShift(dst, src []float32, shift, scale float32) float32 {
	return expShiftGo(dst, src, shift, scale)
}
