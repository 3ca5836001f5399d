package runner

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPruneCheckpointsKeepsTheNewest(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []string{"step-5", "step-10", "step-15", "step-20", "other"} {
		os.MkdirAll(filepath.Join(dir, s), 0o755)
	}
	if err := pruneCheckpoints(dir, 2); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"step-5": false, "step-10": false, "step-15": true, "step-20": true, "other": true} {
		if _, err := os.Stat(filepath.Join(dir, s)); (err == nil) != want {
			t.Errorf("%s kept = %v, want %v", s, err == nil, want)
		}
	}
}
