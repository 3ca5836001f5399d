package fingerprint

import (
	"context"

	"github.com/meshnode/meshnode/mesh"
)

// memoryDetector reads host memory (systemMemory: /proc/meminfo bounded by a cgroup's
// limit) and sets the training budget: a fixed one, or a fraction of what is available.
type memoryDetector struct {
	budget uint64  // fixed memory budget; 0: frac × available
	frac   float64 // budget fraction of available memory
	memory func() (total, available uint64)
}

func newMemoryDetector(budget uint64, frac float64) *memoryDetector {
	if frac == 0 {
		frac = 0.8
	}
	return &memoryDetector{budget: budget, frac: frac, memory: systemMemory}
}

func (d *memoryDetector) Name() string { return "memory measurement" }

// Detect fills the total, available and budgeted memory.
func (d *memoryDetector) Detect(_ context.Context, p *mesh.Profile) error {
	total, avail := d.memory()
	p.MemoryTotalBytes, p.MemoryAvailableBytes, p.MemoryBudgetBytes = total, avail, d.budget
	if d.budget == 0 {
		p.MemoryBudgetBytes = uint64(d.frac * float64(avail))
	}
	// Within what peers accept (mesh.Profile.Validate), so that no reading gets this
	// node's own heartbeats refused.
	p.MemoryTotalBytes = min(p.MemoryTotalBytes, mesh.MaxProfileMemoryBytes)
	p.MemoryAvailableBytes = min(p.MemoryAvailableBytes, mesh.MaxProfileMemoryBytes)
	p.MemoryBudgetBytes = min(p.MemoryBudgetBytes, mesh.MaxProfileMemoryBytes)
	return nil
}
