package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/node/fingerprint"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/mesh"
)

const testSecret = "node-test-secret-0123456789"

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(b), "\n"))
	}
	return len(b), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// testConfig is a fast node on loopback: ephemeral ports, no mDNS or NAT, heartbeats every
// 100 ms, a small GEMM measurement.
func testConfig(t testing.TB, bootstrap ...string) Config {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Mesh = "nodetest"
	cfg.JoinSecret = testSecret
	cfg.Listen = []string{"/ip4/127.0.0.1/udp/0/quic-v1", "/ip4/127.0.0.1/tcp/0"}
	cfg.Bootstrap = bootstrap
	cfg.MDNS, cfg.NAT = false, false
	cfg.API = "127.0.0.1:0"
	cfg.DataListen = "127.0.0.1:0"
	// Generous against a loaded 2-core machine (and -race): a node whose heartbeats are
	// late by a second is still alive.
	cfg.Heartbeat, cfg.SuspectAfter, cfg.DeadAfter = 200*time.Millisecond, 1500*time.Millisecond, 3*time.Second
	cfg.DiscoveryInterval = time.Second
	cfg.Consensus.Probation = time.Millisecond // voters at the first autopilot tick, as before probation
	cfg.Probe = mesh.ProbeConfig{Interval: -1, MinBytes: 16 << 10, MaxBytes: 256 << 10, Target: 20 * time.Millisecond}
	cfg.Profile = ProfileConfig{GemmM: 128, GemmN: 128, GemmK: 128, BatchDuration: 5 * time.Millisecond, Threads: 1}
	cfg.Version = "test"
	// Each in-process node stands for a machine of its own: the planner prices nodes of one
	// host as sharing its cores, so two nodes of this process would gain nothing over one.
	cfg.HostLabel = cfg.DataDir
	cfg.Logger = testLogger(t)
	cfg.profilerHook = shareFirstMeasurement
	// Challenges of a few GFLOP, and proofs that cap no claim they are within 100× of:
	// every member is still proved before it is planned (speedcheck_test.go holds
	// claims to proofs, with no slack).
	cfg.speedProofTarget, cfg.speedProofSlack = 50*time.Millisecond, 100
	return cfg
}

// firstMeasurement holds the compute rates the first in-process test node measured.
var firstMeasurement struct {
	gemm, train                 sync.Once
	gemmRate                    float64
	trainRate, microRate, share float64
}

// shareFirstMeasurement makes every in-process test node report the compute rates the
// first one measured, in a quiet process (the measurement is real; it is taken once).
// Nodes of one test process share its CPU time, so the profile's CPU normalisation
// cannot tell a node's measurement from another node's training: a node that joins a
// training mesh would otherwise measure as slow as its share of the two cores, and plans
// would follow that noise instead of the devices, which are one and the same.
func shareFirstMeasurement(p *fingerprint.Profiler) {
	p.WrapCompute(func(h fingerprint.ComputeHooks) fingerprint.ComputeHooks {
		gemm, train := h.Gemm, h.Train
		return fingerprint.ComputeHooks{
			Gemm: func(m, n, k, threads int, batch time.Duration) float64 {
				firstMeasurement.gemm.Do(func() { firstMeasurement.gemmRate = gemm(m, n, k, threads, batch) })
				return firstMeasurement.gemmRate
			},
			Train: func(batch time.Duration, probe func() float64) (float64, float64, float64) {
				firstMeasurement.train.Do(func() {
					firstMeasurement.trainRate, firstMeasurement.microRate, firstMeasurement.share = train(batch, probe)
				})
				return firstMeasurement.trainRate, firstMeasurement.microRate, firstMeasurement.share
			},
			// The shared rates are wall-clock rates of a quiet process: nothing to normalise.
			CPUTime: func() time.Duration { return 0 },
		}
	})
}

func startNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return n
}

// getJSON decodes GET path of n's API into v, through the api client with n's token.
func getJSON(t testing.TB, n *Node, path string, v any) {
	t.Helper()
	if err := testClient(t, n).Do(context.Background(), http.MethodGet, path, nil, nil, v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

func stateOf(n *Node, id string) mesh.PeerState {
	for _, p := range n.Peers() {
		if p.ID == id {
			return p.State
		}
	}
	return ""
}

// TestSixNodesFindEachOther is acceptance 1: six nodes with only node 0 as bootstrap list
// each other alive with profiles within 10 s; a stopped node turns dead within the
// configured timeout and the others keep running.
func TestSixNodesFindEachOther(t *testing.T) {
	first := startNode(t, testConfig(t))
	nodes := []*Node{first}
	for range 5 {
		nodes = append(nodes, startNode(t, testConfig(t, first.Status().Addrs...)))
	}
	start := time.Now()
	defer func() {
		if t.Failed() {
			for i, n := range nodes {
				for _, p := range n.Peers() {
					t.Logf("node %d: %s %s profile=%v rtt=%v", i, p.ID, p.State, p.Profile != nil, p.RTTMs)
				}
				t.Logf("node %d stats %+v", i, n.Mesh().Stats())
			}
		}
	}()
	testutil.WaitFor(t, 10*time.Second, "all six list each other alive with profiles", func() bool {
		for _, n := range nodes {
			ps := n.Peers()
			if len(ps) != 5 {
				return false
			}
			for _, p := range ps {
				if p.State != mesh.StateAlive || p.Profile == nil || p.Profile.GemmGFLOPS <= 0 {
					return false
				}
			}
		}
		return true
	})
	t.Logf("full mesh of 6 after %s", time.Since(start).Round(time.Millisecond))

	stopped := nodes[3]
	id := stopped.ID().String()
	stoppedAt := time.Now()
	if err := stopped.Close(); err != nil {
		t.Fatal(err)
	}
	rest := append(append([]*Node{}, nodes[:3]...), nodes[4:]...)
	testutil.WaitFor(t, 5*time.Second, "the stopped node dead everywhere", func() bool {
		for _, n := range rest {
			if stateOf(n, id) != mesh.StateDead {
				return false
			}
		}
		return true
	})
	// A clean stop announces itself, so this is normally immediate; if the announcement is
	// lost the heartbeat age decides: dead-after (3 s) plus polling and scheduling slack on
	// a loaded machine.
	testutil.Within(t, "turning dead (dead-after is 3 s)", time.Since(stoppedAt), 4*time.Second)
	// The others keep running: their heartbeats go on arriving after the stop.
	later := time.Now().Add(300 * time.Millisecond)
	testutil.WaitFor(t, 5*time.Second, "the others alive and fresh", func() bool {
		for _, n := range rest {
			fresh := 0
			for _, p := range n.Peers() {
				if p.ID != id && p.State == mesh.StateAlive && p.LastSeen.After(later) {
					fresh++
				}
			}
			if fresh != 4 {
				return false
			}
		}
		return true
	})
}

func TestAPIStatusPeersMetrics(t *testing.T) {
	a := startNode(t, testConfig(t))
	b := startNode(t, testConfig(t, a.Status().Addrs...))
	testutil.WaitFor(t, 10*time.Second, "b probed by a", func() bool {
		var peers []map[string]any
		getJSON(t, a, "/v1/peers", &peers)
		return len(peers) == 1 && peers[0]["rtt_ms"] != nil && peers[0]["bandwidth_mbps"] != nil
	})
	var status map[string]any
	getJSON(t, a, "/v1/status", &status)
	for _, k := range []string{"id", "addrs", "profile", "peers"} {
		if _, ok := status[k]; !ok {
			t.Errorf("status lacks %q: %v", k, status)
		}
	}
	if status["id"] != a.ID().String() || status["peers"] != 1.0 {
		t.Errorf("status = %v", status)
	}
	prof := status["profile"].(map[string]any)
	for _, k := range []string{"gemm_gflops", "cores", "memory_budget_bytes", "gpus"} {
		if _, ok := prof[k]; !ok {
			t.Errorf("profile lacks %q", k)
		}
	}
	if _, ok := prof["gpus"].([]any); !ok {
		t.Errorf("gpus is %T, want a list", prof["gpus"])
	}
	var peers []map[string]any
	getJSON(t, a, "/v1/peers", &peers)
	for _, k := range []string{"id", "addrs", "state", "last_seen", "rtt_ms", "bandwidth_mbps", "profile"} {
		if _, ok := peers[0][k]; !ok {
			t.Errorf("peer lacks %q", k)
		}
	}
	if peers[0]["id"] != b.ID().String() || peers[0]["state"] != "alive" {
		t.Errorf("peer = %v", peers[0])
	}
	body, err := testClient(t, a).Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`meshnode_peers{state="alive"} 1`, "meshnode_gemm_gflops", "meshnode_peer_rtt_seconds",
		"meshnode_admitted_peers 1", "meshnode_auth_retries_total 0", "meshnode_unadmitted_signers_total 0",
		"meshnode_relay_refused_total 0", "meshnode_relay_reservations 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	info, err := api.ReadRuntimeFile(a.cfg.DataDir)
	if err != nil || info.API != a.APIAddr() || info.ID != a.ID().String() {
		t.Errorf("runtime file %+v, %v", info, err)
	}
	a.Close()
	if _, err := api.ReadRuntimeFile(a.cfg.DataDir); err == nil {
		t.Error("runtime file left behind after Close")
	}
}

// recService records its start and close in a shared log.
type recService struct {
	name    string
	log     *[]string
	failure error
}

func (s recService) Name() string { return s.name }
func (s recService) Start(context.Context) error {
	*s.log = append(*s.log, "start "+s.name)
	return s.failure
}
func (s recService) Close() error { *s.log = append(*s.log, "close "+s.name); return nil }

func TestServicesStartInOrderAndCloseInReverse(t *testing.T) {
	var log []string
	n, err := New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	n.AddService(recService{"consensus", &log, nil})
	n.AddService(recService{"engine", &log, nil})
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n.AddService(recService{"late", &log, nil}) == nil {
		t.Error("AddService after Start accepted")
	}
	n.Close()
	want := "start consensus,start engine,close engine,close consensus"
	if got := strings.Join(log, ","); got != want {
		t.Errorf("order %s, want %s", got, want)
	}

	log = nil
	n, err = New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	n.AddService(recService{"ok", &log, nil})
	n.AddService(recService{"broken", &log, io.ErrUnexpectedEOF})
	if err := n.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "start broken") {
		t.Errorf("start error %v", err)
	}
	if got := strings.Join(log, ","); got != "start ok,start broken,close ok" {
		t.Errorf("order after a failed start: %s", got)
	}
	n.Close()
}
