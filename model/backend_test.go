package model

import (
	"math"
	"testing"

	"github.com/meshnode/meshnode/device/devicetest"
)

// TestLayersRunOnADeviceBackend trains the tiny GPT, plain and recomputed, in a workspace
// whose backend keeps its tensors where the host sees them only through copies (as a
// GPU's): every layer must go through the backend, never through a host slice of an
// activation, and since the emulated backend computes with the CPU's kernels the losses
// and gradients are the CPU's bits. The logits for sampling come back the same too.
func TestLayersRunOnADeviceBackend(t *testing.T) {
	for _, recompute := range []bool{false, true} {
		host, dev := perturbed(9), perturbed(9)
		hl, dl := host.Layers, dev.Layers
		if recompute {
			hl, dl = WithRecompute(hl), WithRecompute(dl)
		}
		wsHost, wsDev := &Workspace{}, &Workspace{Backend: devicetest.NewEmulated()}
		for m := range 2 {
			mb := tinyBatch(host.Config, 2, uint64(20+m))
			l1 := ForwardBackward(wsHost, hl, mb, 0.5)
			l2 := ForwardBackward(wsDev, dl, mb, 0.5)
			if math.Float32bits(l1) != math.Float32bits(l2) {
				t.Fatalf("recompute %v, micro-batch %d: loss %v on the CPU, %v on the emulated device", recompute, m, l1, l2)
			}
		}
		p1, p2 := LayerParams(hl), LayerParams(dl)
		for i := range p1 {
			for k, a := range p1[i].Grad.Data {
				if b := p2[i].Grad.Data[k]; math.Float32bits(a) != math.Float32bits(b) {
					t.Fatalf("recompute %v: %s[%d]: gradient %v on the CPU, %v on the emulated device", recompute, p1[i].Name, k, a, b)
				}
			}
		}
		if wsDev.AllocDirty(1) != nil {
			t.Fatal("AllocDirty returned host memory from a device workspace")
		}
	}
	g := perturbed(3)
	mb := tinyBatch(g.Config, 1, 4)
	want := logitsOf(&Workspace{}, g, mb)
	got := logitsOf(&Workspace{Backend: devicetest.NewEmulated()}, g, mb)
	for i := range want {
		if math.Float32bits(want[i]) != math.Float32bits(got[i]) {
			t.Fatalf("logit %d: %v on the CPU, %v on the emulated device", i, want[i], got[i])
		}
	}
}

func logitsOf(ws *Workspace, g *GPT, mb *Batch) []float32 {
	var x []float32
	for _, l := range g.Layers[:len(g.Layers)-1] {
		x, _ = l.Forward(ws, mb, x)
	}
	return g.Layers[len(g.Layers)-1].(*Head).Logits(ws, x, mb.Rows())
}
