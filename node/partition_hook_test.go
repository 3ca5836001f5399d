package node

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh"
)

// putIsolate sends body to the partition hook of the node in dataDir and returns the status.
func putIsolate(t *testing.T, dataDir, body string) int {
	t.Helper()
	return putHook(t, dataDir, PartitionPath, body)
}

// putHook sends body to path of the test hook of the node in dataDir and returns the status.
func putHook(t *testing.T, dataDir, path, body string) int {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(dataDir, PartitionSocket))
	}}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPut, "http://hook"+path, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPartitionHook: a node started with PartitionHookEnv serves its socket (mode 0600),
// cuts the peers it is given and heals on an empty list; a malformed request changes
// nothing; a node started without it has no socket.
func TestPartitionHook(t *testing.T) {
	t.Setenv(PartitionHookEnv, "1")
	a, b := dataNodes(t)
	sock := filepath.Join(a.cfg.DataDir, PartitionSocket)
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatalf("hook socket: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("hook socket %s has mode %v, want 0600", sock, st.Mode().Perm())
	}
	if code := putIsolate(t, a.cfg.DataDir, `["not a peer id"]`); code != http.StatusBadRequest {
		t.Fatalf("a malformed peer ID: %d, want 400", code)
	}
	if code := putIsolate(t, a.cfg.DataDir, `["`+b.ID().String()+`"]`); code != http.StatusNoContent {
		t.Fatalf("isolate: %d, want 204", code)
	}
	testutil.WaitFor(t, 10*time.Second, "a and b dead to each other", func() bool {
		return stateOf(a, b.ID().String()) == mesh.StateDead && stateOf(b, a.ID().String()) == mesh.StateDead
	})
	if code := putIsolate(t, a.cfg.DataDir, `[]`); code != http.StatusNoContent {
		t.Fatalf("heal: %d, want 204", code)
	}
	testutil.WaitFor(t, 10*time.Second, "a and b alive again", func() bool {
		return stateOf(a, b.ID().String()) == mesh.StateAlive && stateOf(b, a.ID().String()) == mesh.StateAlive
	})

	t.Setenv(PartitionHookEnv, "")
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	c := startNode(t, cfg)
	if _, err := os.Stat(filepath.Join(c.cfg.DataDir, PartitionSocket)); !os.IsNotExist(err) {
		t.Fatalf("a node started without %s has a hook socket (%v)", PartitionHookEnv, err)
	}
}

// TestSlowdownHook: the testnet hook changes the running node's emulated slowdown, refuses
// a factor below 1, and 1 turns the emulation off.
func TestSlowdownHook(t *testing.T) {
	t.Setenv(PartitionHookEnv, "1")
	t.Cleanup(func() { kernels.SetSlowdown(1) })
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	n := startNode(t, cfg)
	for _, tc := range []struct {
		body string
		code int
		want float64
	}{{"3", http.StatusNoContent, 3}, {"0.5", http.StatusBadRequest, 3}, {`"fast"`, http.StatusBadRequest, 3}, {"1", http.StatusNoContent, 1}} {
		if code := putHook(t, n.cfg.DataDir, SlowdownPath, tc.body); code != tc.code {
			t.Errorf("slowdown %s: %d, want %d", tc.body, code, tc.code)
		}
		if got := kernels.Slowdown(); got != tc.want {
			t.Errorf("after slowdown %s: factor %g, want %g", tc.body, got, tc.want)
		}
	}
}
