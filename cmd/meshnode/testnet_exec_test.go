package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/testnet"
)

// testnetUp runs `meshnode testnet up` for a 3-node testnet in a temporary directory and
// registers a cleanup that takes it down and kills any PID that survives (after failing
// the test for it).
func testnetUp(t *testing.T, bin string) (string, testnet.State) {
	t.Helper()
	dir := t.TempDir()
	out, err := cliTimeout(t, 3*time.Minute, bin, "testnet", "up", "--nodes", "3", "--dir", dir, "--heartbeat", "300ms", "-o", "json")
	st := readStateOrEmpty(dir)
	t.Cleanup(func() {
		if _, err := cliTimeout(t, time.Minute, bin, "testnet", "down", "--dir", dir); err != nil {
			t.Errorf("testnet down in cleanup: %v", err)
		}
		for _, pid := range testnetPIDs(st) {
			if pidRunning(pid) {
				t.Errorf("pid %d survived `testnet down`", pid)
				if p, err := os.FindProcess(pid); err == nil {
					p.Kill()
				}
			}
		}
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "*", testnet.LogFile))
			for _, l := range append(logs, filepath.Join(dir, testnet.SupervisorLog)) {
				b, _ := os.ReadFile(l)
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s:\n%s", l, b)
			}
		}
	})
	if err != nil {
		t.Fatalf("testnet up: %v", err)
	}
	if err := json.Unmarshal(bytes.TrimSpace(out), &st); err != nil {
		t.Fatalf("testnet up -o json: %v\n%s", err, out)
	}
	return dir, st
}

func readStateOrEmpty(dir string) testnet.State {
	st, _ := testnet.LoadState(dir)
	return st
}

func testnetPIDs(st testnet.State) []int {
	pids := []int{}
	if st.Supervisor > 0 {
		pids = append(pids, st.Supervisor)
	}
	for _, n := range st.Nodes {
		if n.PID > 0 {
			pids = append(pids, n.PID)
		}
	}
	return pids
}

// pidRunning reports whether pid is a live process (zombies waiting for a reaper do not
// count: they hold no resources and run nothing).
func pidRunning(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func cliTimeout(t *testing.T, timeout time.Duration, bin string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %v: %v: %s", filepath.Base(bin), args, err, stderr.String())
	}
	return out, nil
}

func TestTestnetUpKillPartitionDown(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("checks processes through /proc")
	}
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	t.Parallel() // it waits on processes: see binary_test.go
	bin := meshnodeBinary(t)
	dir, st := testnetUp(t, bin)
	if len(st.Nodes) != 3 || st.Supervisor <= 0 || st.Control == "" {
		t.Fatalf("testnet up: state %+v", st)
	}
	for _, pid := range testnetPIDs(st) {
		if !pidRunning(pid) {
			t.Errorf("pid %d of the testnet does not run after up", pid)
		}
	}
	out, err := cliTimeout(t, 30*time.Second, bin, "testnet", "partition", "eu", "us", "--dir", dir)
	if err != nil || !strings.Contains(string(out), "eu ✕ us") {
		t.Errorf("partition: %v\n%s", err, out)
	}
	// The partition cuts the control plane too: node0 (eu) stops hearing node1 (us), and
	// hears it again once healed.
	waitPeerState(t, bin, st.Nodes[0].DataDir, st.Nodes[1].ID, false)
	if _, err := cliTimeout(t, 30*time.Second, bin, "testnet", "partition", "eu", "us", "--heal", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	waitPeerState(t, bin, st.Nodes[0].DataDir, st.Nodes[1].ID, true)
	if _, err := cliTimeout(t, 30*time.Second, bin, "testnet", "partition", "eu", "us", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := cliTimeout(t, 30*time.Second, bin, "testnet", "kill", "node2", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	if pidRunning(st.Nodes[2].PID) {
		t.Errorf("node2 (pid %d) runs after `testnet kill`", st.Nodes[2].PID)
	}
	out, err = cliTimeout(t, 30*time.Second, bin, "testnet", "status", "--dir", dir, "-o", "json")
	var now testnet.State
	if err != nil || json.Unmarshal(out, &now) != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	if now.Nodes[2].Alive || !now.Nodes[0].Alive || len(now.Partitions) != 1 {
		t.Errorf("status after kill and partition: %+v", now)
	}
	if _, err := cliTimeout(t, time.Minute, bin, "testnet", "down", "--dir", dir); err != nil {
		t.Fatal(err)
	}
	for _, pid := range testnetPIDs(st) {
		if pidRunning(pid) {
			t.Errorf("pid %d survived `testnet down`", pid)
		}
	}
}

// waitPeerState waits until `meshnode peers` on the node of dataDir shows peer alive, or
// (alive false) not alive.
func waitPeerState(t *testing.T, bin, dataDir, peer string, alive bool) {
	t.Helper()
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("peer %s alive=%v at %s", peer, alive, dataDir), func() bool {
		out, err := cliTimeout(t, 30*time.Second, bin, "peers", "-o", "json", "--data-dir", dataDir)
		var peers []peerJSON
		if err != nil || json.Unmarshal(out, &peers) != nil {
			return false
		}
		for _, p := range peers {
			if p.ID == peer {
				return (p.State == "alive") == alive
			}
		}
		return !alive
	})
}

// TestTestnetJobEndToEnd is acceptance 2 of issue 7: three nodes, a 30-step job through
// `meshnode submit` and `meshnode job status -o json`, done with a validation loss below
// the untrained model's.
func TestTestnetJobEndToEnd(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("checks processes through /proc")
	}
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	t.Parallel() // it waits on processes: see binary_test.go
	bin := meshnodeBinary(t)
	_, st := testnetUp(t, bin)
	// As `testnet up` tells the user: the node's data dir gives the CLI its API and token.
	dataDir := st.Nodes[0].DataDir
	spec := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(spec, []byte(`name: e2e
train: {steps: 30, eval_every: 10, warmup: 3}
placement: {min_nodes: 3}
checkpoint: {every: 0}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := cliTimeout(t, 30*time.Second, bin, "submit", spec, "--data-dir", dataDir, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var sub consensus.SubmitResult
	if err := json.Unmarshal(out, &sub); err != nil || sub.ID == "" {
		t.Fatalf("submit -o json: %v\n%s", err, out)
	}
	// Follow the job to its end as a user would; the last JSON line is its detail.
	out, err = cliTimeout(t, 150*time.Second, bin, "job", "status", sub.ID, "--follow", "--data-dir", dataDir, "-o", "json")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var job consensus.JobDetail
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &job); jerr != nil {
		t.Fatalf("job status --follow -o json: %v, %v\n%s", err, jerr, out)
	}
	if err != nil || !strings.Contains(string(out), `"event":"progress"`) {
		t.Fatalf("job status --follow: %v (job %s at step %d); output:\n%s", err, job.Status, job.Progress.Step, out)
	}
	if job.Status != consensus.JobDone {
		t.Fatalf("job ended %s; events %+v", job.Status, job.Events)
	}
	var step0, final *float64
	for _, s := range job.Progress.Samples {
		if s.ValLoss == nil {
			continue
		}
		if s.Step == 0 {
			step0 = s.ValLoss
		}
		final = s.ValLoss
	}
	if step0 == nil || final == nil {
		t.Fatalf("no step-0 or final validation loss in the progress samples: %+v", job.Progress.Samples)
	}
	if *final >= *step0 {
		t.Errorf("final validation loss %.4f not below step 0's %.4f", *final, *step0)
	}
	t.Logf("validation loss %.4f → %.4f in %d steps", *step0, *final, job.Progress.Step)
}
