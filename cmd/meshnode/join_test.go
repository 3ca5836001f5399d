package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/internal/testutil"
)

// syncBuffer collects a process's output for the failure log.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// joinProcess is one `meshnode join` child process.
type joinProcess struct {
	cmd     *exec.Cmd
	dataDir string
	out     *syncBuffer
	exited  chan error
}

// startJoin execs `meshnode join` on loopback with ephemeral ports and fast timings. The
// secret, mDNS switch and listen addresses come through MESHNODE_* variables, the rest
// through flags. The process is killed when the test ends if still running.
func startJoin(t *testing.T, bin string, bootstrap ...string) *joinProcess {
	t.Helper()
	p := &joinProcess{dataDir: t.TempDir(), out: &syncBuffer{}, exited: make(chan error, 1)}
	args := []string{"join", "--data-dir", p.dataDir, "--mesh", "clitest", "--api", "127.0.0.1:0", "--data-listen", "127.0.0.1:0",
		"--heartbeat", "200ms", "--gemm-shape", "256x256x256", "--profile-batch", "20ms",
		"--probe-max-bytes", "1MiB", "--discovery-interval", "1s", "--log-level", "warn"}
	if len(bootstrap) > 0 {
		args = append(args, "--bootstrap", strings.Join(bootstrap, ","))
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(),
		"MESHNODE_JOIN_SECRET=cli-test-secret-0123456789",
		"MESHNODE_MDNS=false",
		"MESHNODE_LISTEN=/ip4/127.0.0.1/tcp/0,/ip4/127.0.0.1/udp/0/quic-v1")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.dataDir, p.out.String())
		}
	})
	return p
}

// runtime waits for the node to write its runtime file (API address and listen addresses).
func (p *joinProcess) runtime(t *testing.T) api.RuntimeInfo {
	t.Helper()
	var info api.RuntimeInfo
	testutil.WaitFor(t, 30*time.Second, "the node's runtime file", func() bool {
		var err error
		info, err = api.ReadRuntimeFile(p.dataDir)
		return err == nil
	})
	return info
}

// stop sends SIGINT and waits for a clean exit.
func (p *joinProcess) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.exited <- err // for the cleanup
		if err != nil {
			t.Errorf("join exited with %v after SIGINT", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("join did not exit within 15s of SIGINT")
	}
	if !strings.Contains(p.out.String(), "leaving the mesh") {
		t.Errorf("no clean leave in the output")
	}
}

// cli runs the binary once and returns its stdout.
func cli(t *testing.T, bin string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

type peerJSON struct {
	ID            string          `json:"id"`
	Addrs         []string        `json:"addrs"`
	State         string          `json:"state"`
	LastSeen      time.Time       `json:"last_seen"`
	RTTMs         *float64        `json:"rtt_ms"`
	BandwidthMbps *float64        `json:"bandwidth_mbps"`
	Profile       json.RawMessage `json:"profile"`
}

// TestJoinTwoProcesses is acceptance 3: two `meshnode join` processes on loopback find each
// other by bootstrap, and `meshnode peers -o json` against each lists the other with a
// measured RTT and bandwidth.
func TestJoinTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("execs the binary")
	}
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	t.Parallel() // it waits on processes: see binary_test.go
	bin := meshnodeBinary(t)
	a := startJoin(t, bin)
	infoA := a.runtime(t)
	b := startJoin(t, bin, infoA.Addrs...)
	infoB := b.runtime(t)

	for _, side := range []struct {
		dir, other string
	}{{a.dataDir, infoB.ID}, {b.dataDir, infoA.ID}} {
		testutil.WaitFor(t, 20*time.Second, "peers of "+side.dir+" to list the other with RTT and bandwidth", func() bool {
			out, err := cli(t, bin, "peers", "-o", "json", "--data-dir", side.dir)
			if err != nil {
				t.Fatal(err)
			}
			var peers []peerJSON
			if err := json.Unmarshal(out, &peers); err != nil {
				t.Fatalf("peers -o json: %v: %s", err, out)
			}
			return len(peers) == 1 && peers[0].ID == side.other && peers[0].State == "alive" &&
				peers[0].RTTMs != nil && *peers[0].RTTMs > 0 && peers[0].BandwidthMbps != nil && *peers[0].BandwidthMbps > 0 &&
				len(peers[0].Addrs) > 0 && string(peers[0].Profile) != "null"
		})
	}

	// status -o json and id agree; an explicit --api takes its token from --data-dir.
	out, err := cli(t, bin, "status", "-o", "json", "--api", infoA.API, "--data-dir", a.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		ID      string         `json:"id"`
		Addrs   []string       `json:"addrs"`
		Peers   int            `json:"peers"`
		Profile map[string]any `json:"profile"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatal(err)
	}
	if st.ID != infoA.ID || st.Peers != 1 || len(st.Addrs) == 0 || st.Profile["gemm_gflops"] == nil || st.Profile["memory_budget_bytes"] == nil {
		t.Errorf("status -o json = %s", out)
	}
	out, err = cli(t, bin, "id", "--data-dir", a.dataDir)
	if err != nil || strings.TrimSpace(string(out)) != infoA.ID {
		t.Errorf("id = %q, %v; want %s", out, err, infoA.ID)
	}
	if out, err := cli(t, bin, "peers", "--api", infoB.API, "--data-dir", b.dataDir); err != nil || !strings.Contains(string(out), infoA.ID) {
		t.Errorf("peers (text) = %q, %v", out, err)
	}

	a.stop(t)
	b.stop(t)
	if _, err := api.ReadRuntimeFile(a.dataDir); err == nil {
		t.Error("runtime file left after a clean exit")
	}
}
