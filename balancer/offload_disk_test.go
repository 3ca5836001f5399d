package balancer

import (
	"errors"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Issue 25: an offload plan could exceed the node's free disk (41 GiB planned where 20 GiB
// were free: ENOSPC on the disk of the Raft WAL). A stage offloads only where its whole
// training state fits the announced free space less the reserve; where it does not, the
// job is infeasible on that node, and a node with the room gets the offload.
func TestOffloadStaysWithinAnnouncedFreeDisk(t *testing.T) {
	job := defaultJob(jobspec.RecomputeAuto)
	job.Batch, job.MicroBatches, job.Offload = 4, 4, jobspec.OffloadAuto
	static := staticBytes(job)
	snap := oneNode(0.6 * static)
	short := uint64(static) + jobspec.OffloadDiskReserveMin - 1 // the state fits, the reserve does not
	snap.Nodes[0].DiskFreeBytes = &short
	_, err := NewPlan(snap, job, Options{})
	if !errors.Is(err, ErrInfeasible) {
		t.Fatalf("offload onto a disk %d bytes short of state and reserve: %v, want infeasible", uint64(static)+jobspec.OffloadDiskReserveMin-short, err)
	}
	t.Logf("refused: %v", err)
	roomy := 2*uint64(static) + jobspec.OffloadDiskReserveMin
	snap.Nodes[0].DiskFreeBytes = &roomy
	p, err := NewPlan(snap, job, Options{})
	if err != nil {
		t.Fatalf("offload onto a disk with room: %v", err)
	}
	if st := p.Replicas[0].Stages[0]; st.OffloadBytes <= 0 || float64(st.OffloadBytes) > float64(jobspec.OffloadDiskRoom(roomy)) {
		t.Fatalf("stage %+v: want it offloading within the disk's room %d", st, jobspec.OffloadDiskRoom(roomy))
	}
}

// The reserve is max(1 GiB, 10%) of the free space.
func TestOffloadDiskRoomKeepsTheReserve(t *testing.T) {
	for _, c := range []struct{ free, room uint64 }{
		{0, 0}, {1 << 30, 0}, {3 << 30, 2 << 30}, {100 << 30, 90 << 30},
	} {
		if got := jobspec.OffloadDiskRoom(c.free); got != c.room {
			t.Errorf("room on %d free bytes: %d, want %d", c.free, got, c.room)
		}
	}
}
