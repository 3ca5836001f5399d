package cuda

import (
	"testing"

	"github.com/meshnode/meshnode/device/devicetest"
)

// TestConformance runs devicetest's suite on the GPU; without one it skips saying why.
func TestConformance(t *testing.T) {
	b, err := Open(DefaultConfig())
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	t.Logf("device: %s", b.Describe())
	devicetest.Run(t, b)
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
}
