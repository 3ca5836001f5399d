package testnet

import (
	"context"
	"path/filepath"
	"testing"
)

// TestLaunchReportsTheTopologysNodeCount checks the first line of Launch names the nodes
// it is about to start (it said "starting 0 nodes": it counted those already started).
// The binary does not exist, so Start fails at the first node and nothing runs.
func TestLaunchReportsTheTopologysNodeCount(t *testing.T) {
	dir := t.TempDir()
	tn, err := New(Config{Binary: filepath.Join(dir, "no-meshnode"), Dir: filepath.Join(dir, "tn"), Topology: DefaultTopology(3)})
	if err != nil {
		t.Fatal(err)
	}
	rep := &recorder{}
	if err := tn.Launch(context.Background(), rep); err == nil {
		t.Fatal("Launch with a missing binary succeeded")
	}
	t.Cleanup(func() { _ = tn.Stop() })
	want := "starting 3 nodes in " + tn.Dir()
	if len(rep.lines) == 0 || rep.lines[0] != want {
		t.Fatalf("first line %q, want %q", rep.lines, want)
	}
}
