package parallel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshnode/meshnode/parallel/offload"
)

// breakOffloadFiles points this process's descriptors of the (unlinked) offload files in
// dir at /dev/null opened read-only, as a failing disk would leave them: every later write
// fails and every read comes back short. (Closing them instead would let the descriptor
// numbers be reused by other files.)
func breakOffloadFiles(t *testing.T, dir string) {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	n := 0
	for _, e := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || !strings.HasPrefix(target, filepath.Join(dir, "offload-")) {
			continue
		}
		var fd int
		if _, err := fmt.Sscan(e.Name(), &fd); err == nil {
			if err := syscall.Dup3(int(null.Fd()), fd, syscall.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		t.Fatal("found no offload file to close")
	}
}

// TestOffloadFailureIsAnError: once the offload store's file fails, the step, the
// evaluation and a checkpoint return an *offload.IOError instead of panicking.
func TestOffloadFailureIsAnError(t *testing.T) {
	cfg, data := offloadTestConfig(t)
	cfg.MemoryBudget, cfg.OffloadDir = stateBytes(cfg.Model)/4, t.TempDir()
	tr, err := NewTrainer(cfg, data)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	step(t, tr)
	breakOffloadFiles(t, cfg.OffloadDir)
	var ioErr *offload.IOError
	if _, err := tr.Step(context.Background()); !errors.As(err, &ioErr) {
		t.Fatalf("step after the file failed: %v, want an *offload.IOError", err)
	}
	if _, err := tr.Evaluate(context.Background()); !errors.As(err, &ioErr) {
		t.Errorf("evaluation after the file failed: %v, want an *offload.IOError", err)
	}
	if _, err := tr.SaveCheckpoint(t.TempDir()); !errors.As(err, &ioErr) {
		t.Errorf("checkpoint after the file failed: %v, want an *offload.IOError", err)
	}
}
