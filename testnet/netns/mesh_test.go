//go:build linux

package netns_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/internal/testbin"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/records"
	"github.com/meshnode/meshnode/scheduler"
	"github.com/meshnode/meshnode/testnet/netns"
)

func TestMain(m *testing.M) { os.Exit(testbin.Run(m)) }

// The data plane's default port, which every host uses as the README's commands do.
const dataPort = "4243"

// TestMeshAcrossNamespaces is acceptance 0 of issue 26: nodes on separate hosts (network
// namespaces with their own addresses, not one loopback), started with the README's
// commands and no address flag (`meshnode init`, `meshnode join --join-secret S` on the
// first, `--bootstrap <its address>` on the others), train a job whose plan spans them.
// Each node must find the others' data planes at their real addresses; with the old
// announcement (127.0.0.1) every node dials itself and the job fails.
//
// With three hosts, one is behind a NAT router (MASQUERADE, nothing inbound): the public
// nodes cannot dial its data plane, so they must send over the connection it opened to
// them (its link probe dials them when it joins); its peers show it as "inbound".
func TestMeshAcrossNamespaces(t *testing.T) {
	if testing.Short() {
		t.Skip("execs three meshnode processes in network namespaces: not in -short mode")
	}
	if raceEnabled {
		t.Skip("execs uninstrumented processes: the race pass only adds load")
	}
	t.Run("two hosts", func(t *testing.T) { runMesh(t, 2, 0, netns.PortPreserving) })
	t.Run("three hosts, one behind NAT", func(t *testing.T) { runMesh(t, 2, 1, netns.PortPreserving) })
	t.Run("three hosts, one behind a port-randomising NAT", func(t *testing.T) { runMesh(t, 2, 1, netns.PortRandom) })
}

// TestMeshBehindTwoNATs is acceptance 1 of issue 26 (reachability): two hosts each behind
// its own port-randomising NAT (nothing can dial either, and no port can be guessed) and
// one public host. The NATed nodes reach each other only through the public member: each
// reserves a relay slot on it and announces the circuit, they admit each other over the
// relayed connection, their link probes find no data-plane address and measure the libp2p
// path instead, and a job planned on all three finishes, with tensors between the NATed
// nodes carried over that path ("relayed", or "hole-punched" where DCUtR succeeds).
// Without the relay they never admit each other (docs/mesh.md) and the job cannot run.
func TestMeshBehindTwoNATs(t *testing.T) {
	if testing.Short() {
		t.Skip("execs three meshnode processes in network namespaces: not in -short mode")
	}
	if raceEnabled {
		t.Skip("execs uninstrumented processes: the race pass only adds load")
	}
	runMesh(t, 1, 2, netns.PortRandom)
}

// node is one `meshnode join` in its host.
type node struct {
	host *netns.Host
	dir  string
	id   string
	cmd  *exec.Cmd
	done chan error
}

// runMesh runs the scenario on `public` hosts on the segment and `natted` hosts each behind
// its own NAT router of kind nat.
func runMesh(t *testing.T, public, natted int, nat netns.NAT) {
	netns.Require(t, natted > 0)
	bin := testbin.Meshnode(t)
	net := netns.New(t)
	var nodes []*node
	for i := range public {
		nodes = append(nodes, &node{host: net.AddHost(fmt.Sprintf("n%d", i)), dir: t.TempDir()})
	}
	for i := range natted {
		nodes = append(nodes, &node{host: net.AddNATHost(fmt.Sprintf("natted%d", i), nat), dir: t.TempDir()})
	}

	// meshnode init on the first host: the secret and the bootstrap address it prints.
	var initRes struct {
		JoinSecret string `json:"join_secret"`
		Bootstrap  string `json:"bootstrap"`
	}
	out := cli(t, bin, nodes[0], 30*time.Second, "init", "-o", "json")
	if err := json.Unmarshal(out, &initRes); err != nil || initRes.JoinSecret == "" {
		t.Fatalf("init -o json = %q (%v)", out, err)
	}
	if !strings.Contains(initRes.Bootstrap, "/ip4/"+nodes[0].host.Addr+"/") {
		t.Fatalf("init's bootstrap %q is not at the first host's address %s", initRes.Bootstrap, nodes[0].host.Addr)
	}
	start := time.Now()
	for i, n := range nodes {
		args := []string{"join", "--join-secret", initRes.JoinSecret}
		if i > 0 {
			args = append(args, "--bootstrap", initRes.Bootstrap)
		}
		n.start(t, bin, args...)
	}
	for _, n := range nodes {
		n.id = n.runtime(t).ID
	}

	// Every node sees the others alive and reached their data planes where they are: a
	// public host at its own address. A NATed host behind a port-preserving NAT at its
	// router's public address (the address peers observe; the NATed node's own probe to
	// this peer opened the mapping of its data port) or, before that, over the connection
	// it opened ("inbound"); behind a port-randomising NAT only over that connection.
	reached := func(from, to *node, got string) bool {
		switch {
		case from.host.NAT && to.host.NAT: // only libp2p connects them
			return got == "relayed" || got == "hole-punched"
		case !to.host.NAT:
			return got == to.host.Addr+":"+dataPort
		case nat == netns.PortRandom:
			return got == "inbound"
		default:
			return got == "inbound" || got == to.host.Public+":"+dataPort
		}
	}
	for _, from := range nodes {
		testutil.WaitFor(t, 90*time.Second, "every peer's data plane reached by "+from.host.Name, func() bool {
			peers := from.peers(t, bin)
			for _, to := range nodes {
				if to == from {
					continue
				}
				p, ok := peers[to.id]
				if !ok || p.State != "alive" || !reached(from, to, p.DataAddr) || p.RTTMs == nil {
					return false
				}
			}
			return true
		})
	}
	for _, from := range nodes {
		for id, p := range from.peers(t, bin) {
			t.Logf("%s sees %s: data_addr %s, rtt %.2f ms, candidates %q", from.host.Name, id, p.DataAddr, *p.RTTMs, p.Profile.DataAddrs)
		}
	}

	t.Logf("every data plane reached %.1f s after the first join", time.Since(start).Seconds())
	// The planner prices each pair with the link its nodes announce in their profiles, and
	// a node announces the data plane's measurement of a data-plane peer or none (a pair
	// without one is priced like the worst link): wait until every node's view of every
	// other's profile names a link to each of the rest, as the leader's plan will see it.
	for _, viewer := range nodes {
		testutil.WaitFor(t, 60*time.Second, "every announced profile, seen from "+viewer.host.Name+", links every other node", func() bool {
			peers := viewer.peers(t, bin)
			for _, from := range nodes {
				if from == viewer {
					continue
				}
				p, ok := peers[from.id]
				if !ok || p.Profile == nil {
					return false
				}
				for _, to := range nodes {
					if to != from && !slices.ContainsFunc(p.Profile.Links, func(l records.ProfileLink) bool { return l.Peer == to.id && l.BandwidthBps > 0 }) {
						return false
					}
				}
			}
			return true
		})
	}
	for _, n := range nodes {
		if n.host.NAT {
			n.logLines(t, "relay reservation held", "peer admitted")
		}
	}
	before := natPairBytes(t, bin, nodes)
	submitted := time.Now()

	// A job that needs every node: one pipeline with a stage on each.
	job := filepath.Join(t.TempDir(), "job.yaml")
	spec := fmt.Sprintf(`name: netns
model: {layers: 2, d_model: 32, heads: 2, context: 32}
train: {steps: 20, batch: 4, warmup: 1, eval_every: 10}
parallel: {replicas: %d, stages: 1, sync: sync}
placement: {min_nodes: %d}
checkpoint: {every: 1000}
`, len(nodes), len(nodes))
	if err := os.WriteFile(job, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	submitter := nodes[len(nodes)-1] // a follower, behind the NAT when there is one
	out = cli(t, bin, submitter, 4*time.Minute, "submit", job, "--wait")
	m := regexp.MustCompile(`submitted job (\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("submit --wait printed no job id:\n%s", out)
	}
	var detail struct {
		Status string `json:"status"`
		Plan   *struct {
			Plan scheduler.JobPlan `json:"plan"`
		} `json:"plan"`
		Progress struct {
			Step      int    `json:"step"`
			Steps     int    `json:"steps"`
			BytesSent uint64 `json:"bytes_sent"`
		} `json:"progress"`
	}
	out = cli(t, bin, nodes[0], 30*time.Second, "job", "status", string(m[1]), "-o", "json")
	if err := json.Unmarshal(out, &detail); err != nil || detail.Plan == nil {
		t.Fatalf("job status -o json: %v\n%s", err, out)
	}
	planned := slices.Compact(slices.Sorted(slices.Values(detail.Plan.Plan.Nodes())))
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.id)
	}
	slices.Sort(ids)
	if detail.Status != "done" || !slices.Equal(planned, ids) {
		t.Logf("plan: %s; nodes %+v; links priced: %+v; max replicas %d", detail.Plan.Plan.Reason, detail.Plan.Plan.Inputs.Snapshot.Nodes, detail.Plan.Plan.Inputs.Snapshot.Links, detail.Plan.Plan.Inputs.MaxReplicas)
		t.Fatalf("job %s: status %s, plan on %q; want done on every node %q", m[1], detail.Status, planned, ids)
	}
	if pr := detail.Progress; pr.Step != pr.Steps || pr.BytesSent == 0 {
		t.Fatalf("job %s: step %d of %d, %d data-plane bytes sent; want every step and tensors exchanged", m[1], pr.Step, pr.Steps, pr.BytesSent)
	}
	t.Logf("job %s done %.1f s after submit, planned on %d nodes, %d data-plane bytes sent (last report)",
		m[1], time.Since(submitted).Seconds(), len(planned), detail.Progress.BytesSent)
	if before >= 0 {
		// The planner priced the NATed pair's link with what their probes measured over
		// the relay (or punched path).
		priced := false
		for _, l := range detail.Plan.Plan.Inputs.Snapshot.Links {
			ends := []string{l.From, l.To}
			priced = priced || l.Bandwidth > 0 && slices.Contains(ends, nodes[1].id) && slices.Contains(ends, nodes[2].id)
		}
		if !priced {
			t.Fatalf("the plan priced no link between the NATed nodes: %+v", detail.Plan.Plan.Inputs.Snapshot.Links)
		}
		after := natPairBytes(t, bin, nodes)
		if after <= before {
			t.Fatalf("bytes between the NATed nodes over relayed or hole-punched paths: %d before the job, %d after; want the job's tensors on them", before, after)
		}
		t.Logf("the NATed nodes exchanged %d bytes over relayed or hole-punched paths during the job", after-before)
	}
}

// natPairBytes is the payload bytes the first NATed node exchanged with the second over
// relayed and hole-punched paths, as its `peers -o json` reports them; -1 with fewer than
// two NATed nodes.
func natPairBytes(t *testing.T, bin string, nodes []*node) int64 {
	t.Helper()
	var natted []*node
	for _, n := range nodes {
		if n.host.NAT {
			natted = append(natted, n)
		}
	}
	if len(natted) < 2 {
		return -1
	}
	p := natted[0].peers(t, bin)[natted[1].id]
	t.Logf("%s sees %s: path %q, bytes per path %v", natted[0].host.Name, natted[1].host.Name, p.Path, p.PathBytes)
	return p.PathBytes["relayed"] + p.PathBytes["hole-punched"]
}

// start runs meshnode with args in the node's host, with its own data directory and the
// caller's MESHNODE_* variables left out; the process is killed when the test ends.
func (n *node) start(t *testing.T, bin string, args ...string) {
	t.Helper()
	log, err := os.Create(filepath.Join(n.dir, "join.log"))
	if err != nil {
		t.Fatal(err)
	}
	n.cmd = n.host.Command(bin, append(args, "--data-dir", n.dir)...)
	n.cmd.Env = cleanEnv()
	n.cmd.Stdout, n.cmd.Stderr = log, log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.done = make(chan error, 1)
	go func() { n.done <- n.cmd.Wait(); log.Close() }()
	t.Cleanup(func() {
		_ = n.cmd.Process.Kill()
		<-n.done
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("log of %s (%s):\n%s", n.host.Name, n.host.Addr, b)
		}
	})
}

// logLines logs the lines of the node's log that contain any of substrs (when its
// reservations were held, whom it admitted when), to explain the test's timings.
func (n *node) logLines(t *testing.T, substrs ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.dir, "join.log"))
	if err != nil {
		t.Logf("log of %s: %v", n.host.Name, err)
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		for _, s := range substrs {
			if strings.Contains(line, s) {
				t.Logf("%s: %s", n.host.Name, line[:min(len(line), 200)])
				break
			}
		}
	}
}

// runtime waits for the node's runtime file.
func (n *node) runtime(t *testing.T) api.RuntimeInfo {
	t.Helper()
	var info api.RuntimeInfo
	testutil.WaitFor(t, 60*time.Second, "the runtime file of "+n.host.Name, func() bool {
		select {
		case err := <-n.done:
			n.done <- err
			t.Fatalf("%s exited: %v", n.host.Name, err)
		default:
		}
		var err error
		info, err = api.ReadRuntimeFile(n.dir)
		return err == nil
	})
	return info
}

// peers is `meshnode peers -o json` on the node's host, by peer ID.
func (n *node) peers(t *testing.T, bin string) map[string]api.Peer {
	t.Helper()
	var list []api.Peer
	out := cli(t, bin, n, 30*time.Second, "peers", "-o", "json")
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("peers -o json: %v\n%s", err, out)
	}
	byID := map[string]api.Peer{}
	for _, p := range list {
		byID[p.ID] = p
	}
	return byID
}

// cli runs a meshnode command in the node's host against its data directory and returns
// its standard output; it fails the test if the command fails.
func cli(t *testing.T, bin string, n *node, timeout time.Duration, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := n.host.Command(bin, args...)
	cmd.Env = append(cleanEnv(), "MESHNODE_DATA_DIR="+n.dir)
	cmd.Dir = n.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = cmd.Process.Kill() }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("meshnode %s on %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), n.host.Name, err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.Bytes()
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESHNODE_") {
			env = append(env, kv)
		}
	}
	return env
}
