package cpu_test

import (
	"testing"

	"github.com/meshnode/meshnode/device"
	"github.com/meshnode/meshnode/device/cpu"
	"github.com/meshnode/meshnode/kernels"
)

// BenchmarkDispatch measures what the device layer adds to one operation on the CPU: the
// interface call, the Tensor values and the host-memory check, against the kernels call
// alone, on a one-element Add (so the arithmetic is nothing). A training step makes about
// 20 backend calls per block per micro-batch:
//
//	go test ./device/cpu -run '^$' -bench Dispatch -count 5
func BenchmarkDispatch(b *testing.B) {
	x := make([]float32, 1)
	b.Run("kernels", func(b *testing.B) {
		for b.Loop() {
			kernels.Add(x, x, x)
		}
	})
	b.Run("backend", func(b *testing.B) {
		var be device.Backend = cpu.New()
		t := device.Host(x)
		for b.Loop() {
			be.Add(t, t, t)
		}
	})
}
