package fingerprint

import (
	"context"
	"time"

	"github.com/meshnode/meshnode/mesh"
)

// diskDetector measures the data directory's free space at every measurement and its
// sequential bandwidth once (the directory's disk does not change), what offloaded
// training state moves at.
type diskDetector struct {
	dir   string
	limit time.Duration // bound on each direction of the bandwidth probe
	free  func(dir string) uint64
	// bw measures the directory's read and write bandwidth (measureDisk).
	bw func(dir string, limit time.Duration) (read, write float64)

	measured                    bool
	lastDiskRead, lastDiskWrite float64
}

// newDiskDetector bounds the probe at twice a GEMM batch, 50 ms at least, and at most
// diskProbeBytes each way.
func newDiskDetector(dir string, batch time.Duration) *diskDetector {
	return &diskDetector{dir: dir, limit: max(2*batch, 50*time.Millisecond), free: diskFree, bw: measureDisk}
}

func (d *diskDetector) Name() string { return "disk measurement" }

// Detect fills the free space and the bandwidths.
func (d *diskDetector) Detect(_ context.Context, p *mesh.Profile) error {
	if !d.measured && d.bw != nil {
		d.lastDiskRead, d.lastDiskWrite = d.bw(d.dir, d.limit)
		d.measured = true
	}
	// Clamped to what peers accept (mesh.Profile.Validate): a filesystem that reports an
	// absurd free size must not get this node's own heartbeats refused.
	p.DiskFreeBytes = min(d.free(d.dir), mesh.MaxProfileDiskBytes)
	p.DiskReadBps, p.DiskWriteBps = d.lastDiskRead, d.lastDiskWrite
	return nil
}
