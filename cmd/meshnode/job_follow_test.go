package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/node"
)

// startInProcessNode starts one real node (mesh, Raft control plane, engine, API) in this
// process, on loopback ports; the CLI finds it through the returned data dir. Jobs may
// use files under dataRoot.
func startInProcessNode(t *testing.T, dataRoot string) (*node.Node, string) {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.Mesh, cfg.JoinSecret = t.TempDir(), "clitest", "0123456789abcdefgh"
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.MDNS, cfg.DHT, cfg.NAT = false, false, false
	cfg.API, cfg.DataListen, cfg.DataRoots = "127.0.0.1:0", "127.0.0.1:0", []string{dataRoot}
	cfg.Profile = node.ProfileConfig{GemmM: 128, GemmN: 128, GemmK: 128, BatchDuration: 5 * time.Millisecond, Threads: 1}
	cfg.Version, cfg.Logger = "test", testutil.Logger(t)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, cfg.DataDir
}

// `job status --follow` prints the job's progress as it trains, returns once the job
// ends, and exits non-zero when it did not end done (here: cancelled from another CLI).
func TestJobStatusFollowUntilCancelled(t *testing.T) {
	root := t.TempDir()
	corpus := filepath.Join(root, "corpus.txt")
	if err := os.WriteFile(corpus, []byte(strings.Repeat("func (n *Node) Start(ctx context.Context) error { return nil }\n", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := writeSpec(t, "name: followed\nmodel: {layers: 2, d_model: 32, heads: 2, context: 32, vocab: 256}\n"+
		"data: {source: "+corpus+"}\ntrain: {steps: 100000, batch: 4, eval_every: 1000, warmup: 2}\ncheckpoint: {every: 0}\n")
	n, dir := startInProcessNode(t, root)
	t.Setenv("MESHNODE_API", "")
	os.Unsetenv("MESHNODE_API")
	code, out, errOut := runJobCLI(t, "submit", spec, "--data-dir", dir, "-o", "json")
	var sub consensus.SubmitResult
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil {
		t.Fatalf("submit: exit %d %q %q", code, out, errOut)
	}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"job", "status", sub.ID, "--follow", "--data-dir", dir, "-o", "json"}, &stdout, &stderr)
	}()
	testutil.WaitFor(t, 2*time.Minute, "progress on the follower and in the FSM", func() bool {
		return strings.Contains(stdout.String(), `"event":"progress"`) && progressStep(n, sub.ID) > 0
	})
	if code, _, errOut := runJobCLI(t, "job", "cancel", sub.ID, "--data-dir", dir); code != 0 {
		t.Fatalf("job cancel: exit %d %q", code, errOut)
	}
	var code2 int
	select {
	case code2 = <-done:
	case <-time.After(time.Minute):
		t.Fatal("job status --follow still running a minute after the job was cancelled")
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var final consensus.JobDetail
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &final); err != nil || final.Status != consensus.JobCancelled {
		t.Errorf("last line %q: want the cancelled job's detail (%v)", lines[len(lines)-1], err)
	}
	if code2 != 1 || !strings.Contains(stderr.String(), "cancelled") {
		t.Errorf("follow exited %d with %q; want 1 and the job's end", code2, stderr.String())
	}
}

// progressStep is the latest step n's FSM holds for the job.
func progressStep(n *node.Node, id string) int {
	j, _, err := n.Consensus().Job(context.Background(), id, false)
	if err != nil || len(j.Progress) == 0 {
		return 0
	}
	return j.Progress[len(j.Progress)-1].Step
}
