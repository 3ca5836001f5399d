package parallel

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// Issue 25: an offload store was created whatever the disk held, and its writes met ENOSPC
// on the disk the raft WAL shares. The node now refuses the store before writing anything
// when its file does not fit the free space less the reserve, with an error naming the
// directory; with room it trains.
func TestOffloadIsRefusedWhenTheDiskIsShort(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	state := stateBytes(cfg.Model)
	cfg.MemoryBudget, cfg.OffloadDir = state/4, t.TempDir()
	cfg.DiskFree = func(string) int64 { return jobspec.OffloadDiskReserveMin + state/2 }
	_, err := NewTrainer(cfg, data)
	if !errors.Is(err, ErrOffloadDiskShort) || !strings.Contains(err.Error(), "data-dir: ") || !strings.Contains(err.Error(), cfg.OffloadDir) {
		t.Fatalf("offload onto a disk with room for half the state: %v, want ErrOffloadDiskShort naming data-dir and %s", err, cfg.OffloadDir)
	}
	if files, _ := os.ReadDir(cfg.OffloadDir); len(files) != 0 {
		t.Fatalf("%d files written before the refusal", len(files))
	}
	cfg.DiskFree = func(string) int64 { return jobspec.OffloadDiskReserveMin + 4*state }
	r, err := NewTrainer(cfg, data)
	if err != nil {
		t.Fatalf("offload onto a disk with room: %v", err)
	}
	r.Close()
}
