package testnet

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testbin"
)

func TestMain(m *testing.M) { os.Exit(testbin.Run(m)) }

// meshnodeBinary is the meshnode binary the testnet runs, built once per test run
// ($MESHNODE_TESTNET_BIN names a prebuilt one).
func meshnodeBinary(t testing.TB) string { return testbin.Meshnode(t) }

// startTestnet starts a testnet of topo in a temporary directory, waits until it is ready
// and stops it when the test ends; on failure the nodes' logs are printed.
func startTestnet(t *testing.T, topo Topology) *Testnet {
	t.Helper()
	if testing.Short() && len(topo.Nodes) > 3 {
		t.Skip("more than three processes: not in -short mode")
	}
	tn, err := New(Config{Binary: meshnodeBinary(t), Dir: t.TempDir(), Topology: topo,
		Heartbeat: 300 * time.Millisecond, ExtraArgs: []string{"--gemm-shape", "512x256x256", "--profile-batch", "50ms"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := tn.Stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			for _, n := range tn.Nodes() {
				t.Logf("log of %s:\n%s", n.Spec.Name, tailFile(n.LogPath(), 6000))
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := tn.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tn.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return tn
}

func TestTestnetStartsThreeNodesAndStopsThemAll(t *testing.T) {
	topo := DefaultTopology(3)
	tn := startTestnet(t, topo)
	st, err := LoadState(tn.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Nodes) != 3 {
		t.Fatalf("state has %d nodes, want 3", len(st.Nodes))
	}
	ids := map[string]bool{}
	for i, n := range st.Nodes {
		if n.ID == "" || n.API == "" || n.PID <= 0 || !n.Alive || n.Region != topo.Nodes[i].Region || n.Slowdown != topo.Nodes[i].Slowdown {
			t.Errorf("node %d in state: %+v", i, n)
		}
		ids[n.ID] = true
	}
	if len(ids) != 3 {
		t.Errorf("node ids not distinct: %v", ids)
	}
	// Every node reports the region and slowdown it was given, and advertises its relay.
	for _, n := range tn.Nodes() {
		s, err := n.Client().Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if p := s.Profile; p == nil || p.Region != n.Spec.Region || p.Slowdown != n.Spec.Slowdown || p.DataAddr != n.Relay.Addr().String() {
			t.Errorf("%s profile %+v; want region %s, slowdown %v, data_addr %s", n.Spec.Name, p, n.Spec.Region, n.Spec.Slowdown, n.Relay.Addr())
		}
	}
	if err := tn.Kill("node2"); err != nil {
		t.Fatal(err)
	}
	if n, _ := tn.Node("node2"); n.Alive() || processAlive(n.PID(), "") {
		t.Error("node2 still runs after Kill")
	}
	if err := tn.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if processAlive(n.PID, "") {
			t.Errorf("node %s (pid %d) survived Stop", n.Name, n.PID)
		}
	}
}

// parallelScenario runs a scenario beside the other parallel ones (CI's scenario step
// passes -parallel 4): each has its own testnet (its own directory, ports and join secret),
// and their nodes spend most of the time asleep (emulated slow devices) or waiting on
// heartbeats, timeouts and each other, so that four of them together keep two cores less
// busy than the default model's training alone (docs/testnet.md, "Scenario tests"). A
// scenario whose assertion is a speed stays serial (it does not call this): load that
// comes and goes beside it is what the straggler detector sees, and a joined node is
// planned only if its measured speed is worth a new epoch before the job ends.
func parallelScenario(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// requireScenarios skips a multi-process fault scenario (killed, slowed, partitioned or
// joining nodes; minutes of CPU on two cores) unless the tests are built with
// -tags scenarios, as CI's scenario step builds them:
//
//	go test -tags scenarios -timeout 30m ./testnet
func requireScenarios(t *testing.T) {
	t.Helper()
	if !scenariosEnabled {
		t.Skip("a multi-process fault scenario: run with -tags scenarios (CI does; docs/testnet.md)")
	}
}
