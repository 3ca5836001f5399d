package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/kernels"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/node"
)

type joinOptions struct {
	cfg          node.Config
	memoryBudget string
	gemmShape    string
	probeMax     string
	relayBytes   string
	maxData      string
	localData    []string
	threads      int
	logLevel     string
}

func newJoinCmd() *cobra.Command {
	o := joinOptions{cfg: node.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "join",
		Short: "Run a node: join (or start) a mesh and serve the local API until interrupted",
		Long: `Run a meshnode node in the foreground. It measures this machine (GEMM rate on the engine's
kernels, memory, disk, GPUs), joins the mesh through --bootstrap peers, mDNS and the DHT,
proves the join secret to every peer it meets, and serves the local HTTP API (--api) for
` + "`meshnode status`, `meshnode peers`" + ` and the rest. The first node of a mesh needs no --bootstrap.
SIGINT or SIGTERM makes it announce that it leaves and exit.

--listen and --bootstrap take libp2p multiaddrs, repeated or comma-separated, e.g.
  --listen /ip4/0.0.0.0/tcp/4242,/ip4/0.0.0.0/udp/4242/quic-v1
  --bootstrap /ip4/203.0.113.7/tcp/4242/p2p/12D3KooW...
Prefer MESHNODE_JOIN_SECRET to --join-secret: command lines are visible to other users.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runJoin(cmd, &o) },
	}
	c := &o.cfg
	f := cmd.Flags()
	f.StringVar(&c.DataDir, "data-dir", c.DataDir, "node data directory (identity key, state)")
	f.StringVar(&c.Mesh, "mesh", c.Mesh, "mesh name")
	f.StringVar(&c.JoinSecret, "join-secret", "", "the mesh's join secret (meshnode init prints a new one)")
	f.StringSliceVar(&c.Allow, "allow", nil, "admit only these peer IDs (in addition to the secret)")
	f.StringSliceVar(&c.Listen, "listen", nil, "multiaddrs to listen on (default QUIC-v1 and TCP on port 4242, IPv4 and IPv6)")
	f.StringSliceVar(&c.Bootstrap, "bootstrap", nil, "multiaddrs of members to join through, ending in /p2p/<peer-id>")
	f.StringVar(&c.API, "api", c.API, "loopback host:port of the local HTTP API (port 0: any free port; empty: no API)")
	f.StringSliceVar(&c.APIHosts, "api-host", nil, "extra host:port names the API answers to (default: 127.0.0.1, localhost and [::1] with its port)")
	f.StringSliceVar(&c.DataRoots, "data-root", nil, "directories whose files jobs submitted here may use as local data, besides the submitter's working directory")
	f.StringSliceVar(&o.localData, "local-data", nil, "expose a local dataset to jobs as NAME=PATH (repeatable): a job with data.local NAME trains here on PATH (a sharded corpus, a directory with train.bin and val.bin, or a text file), which never leaves this node; only the name is announced")
	f.StringVar(&o.maxData, "max-data-bytes", "1GiB", "largest local data file a submitted job may name")
	f.IntVar(&c.DatasetReplicas, "dataset-replicas", node.DefaultDatasetReplicas, "members besides this node that hold a job's dataset before a submit here answers, so the job outlives this node (0: none)")
	f.BoolVar(&c.MDNS, "mdns", c.MDNS, "discover members on the local network with mDNS")
	f.BoolVar(&c.DHT, "dht", c.DHT, "advertise and find members through the mesh's Kademlia DHT")
	f.BoolVar(&c.NAT, "nat", c.NAT, "NAT traversal: UPnP/NAT-PMP port mapping, AutoNAT, hole punching, relay v2")
	f.IntVar(&c.Relay.MaxReservations, "relay-reservations", 0, "members that may hold a relay reservation on this node at once (0: 64)")
	f.IntVar(&c.Relay.MaxCircuits, "relay-circuits", 0, "relayed connections open to or from one member at once (0: 8)")
	f.StringVar(&o.relayBytes, "relay-circuit-bytes", "0", "bytes one relayed connection carries in each direction before this node resets it (0: 4GiB)")
	f.DurationVar(&c.Relay.CircuitDuration, "relay-circuit-duration", 0, "longest a relayed connection stays open (0: 1h)")
	f.DurationVar(&c.Heartbeat, "heartbeat", c.Heartbeat, "heartbeat interval")
	f.DurationVar(&c.SuspectAfter, "suspect-after", 0, "heartbeat age after which a peer is suspect (default 3 heartbeats)")
	f.DurationVar(&c.DeadAfter, "dead-after", 0, "heartbeat age after which a peer is dead (default 5 heartbeats)")
	f.DurationVar(&c.AuthTimeout, "auth-timeout", c.AuthTimeout, "time a new peer has to prove the join secret")
	f.DurationVar(&c.DiscoveryInterval, "discovery-interval", c.DiscoveryInterval, "how often bootstrap peers are retried and the DHT is queried")
	f.DurationVar(&c.Reprofile, "reprofile", c.Reprofile, "how often the device profile is measured again (negative: only at start)")
	f.DurationVar(&c.Probe.Interval, "probe-interval", 5*time.Minute, "how often links to peers are probed again (negative: only on join)")
	f.StringVar(&o.probeMax, "probe-max-bytes", "32MiB", "largest bandwidth-probe transfer")
	f.StringVar(&o.memoryBudget, "memory-budget", "80%", "memory offered to training: a size (8GiB) or a share of available memory (80%); it also sets the Go memory limit unless GOMEMLIMIT is set (docs/memory.md)")
	f.Float64Var(&c.Profile.Slowdown, "slowdown", 1, "run kernels this many times slower (testnets emulate slow devices; the profile measures it)")
	f.StringVar(&o.gemmShape, "gemm-shape", "2048x512x512", "GEMM shape MxNxK of the profile measurement")
	f.DurationVar(&c.Profile.BatchDuration, "profile-batch", c.Profile.BatchDuration, "length of each of the three timed GEMM batches")
	f.IntVar(&o.threads, "threads", 0, "kernel threads (0: all cores)")
	f.StringVar(&c.DataListen, "data-listen", c.DataListen, "UDP host:port of the tensor data plane (QUIC); port 0: any free port")
	f.StringVar(&c.DataAdvertise, "data-advertise", "", "the only data-plane address (host:port) announced to peers, for when none of the defaults is reachable, e.g. a forwarded port (default: every interface's address, the address peers observe, loopback last; peers keep the first that answers)")
	f.StringVar(&c.Region, "region", "", "label of where this node is, carried in its profile")
	f.StringVar(&c.HostLabel, "host-label", "", "name of the machine this node runs on, in place of its machine and boot ids: the planner prices nodes with one label as sharing that machine's cores (default: the ids, so nodes on one machine share it)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.BoolVar(&c.Consensus.Bootstrap, "bootstrap-raft", false, "found a new Raft control plane even with --bootstrap peers (default: only without them)")
	f.IntVar(&c.Consensus.Voters, "voters", 3, "Raft voting members the leader keeps (odd); later nodes join as non-voters")
	f.IntVar(&c.Consensus.MaxLiveJobsPerMember, "max-live-jobs", consensus.DefaultMaxLiveJobsPerMember, "live jobs one member may have (a cluster setting: the founding leader's value is replicated and kept)")
	f.DurationVar(&c.Consensus.Probation, "raft-probation", consensus.DefaultProbation, "how long the leader watches a live non-voter before promoting it to voter ('meshnode raft promote|refuse' decide earlier)")
	return withEnv(cmd)
}

func runJoin(cmd *cobra.Command, o *joinOptions) error {
	if err := o.finish(); err != nil {
		return err
	}
	if err := o.cfg.Validate(); err != nil {
		return usageError{err: err}
	}
	if o.threads > 0 {
		kernels.SetThreads(o.threads)
	}
	// This process's kernels run as slow as the emulated device (a testnet's --slowdown),
	// and the node's profile, measured on them, sees it. The process owns this setting, as
	// it owns the thread count: a node in a test process leaves both alone.
	if o.cfg.Profile.Slowdown > 1 {
		kernels.SetSlowdown(o.cfg.Profile.Slowdown)
	}
	n, err := node.New(o.cfg)
	if err != nil {
		return withListenFlag(err)
	}
	ctx := cmd.Context()
	if err := n.Start(ctx); err != nil {
		return withListenFlag(err)
	}
	st := n.Status()
	if st.Profile != nil {
		// The budget the node offered at its first measurement: what the planner fits
		// this node's training into.
		if limit := applyMemoryLimit(st.Profile.MemoryBudgetBytes); limit > 0 {
			o.cfg.Logger.Info("Go memory limit set from the memory budget (GOMEMLIMIT overrides)",
				"budget", st.Profile.MemoryBudgetBytes, "limit", limit)
		}
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "node %s joined mesh %q\n", st.ID, st.Mesh)
	if addr := n.APIAddr(); addr != "" {
		fmt.Fprintf(w, "API: http://%s (token in %s)\n", addr, filepath.Join(o.cfg.DataDir, api.TokenFile))
		fmt.Fprintf(w, "dashboard: %s\n", n.DashboardURL())
	}
	for _, a := range st.Addrs {
		fmt.Fprintf(w, "address: %s\n", a)
	}
	<-ctx.Done()
	fmt.Fprintln(w, "leaving the mesh")
	return n.Close()
}

// listenFlags are the join flags that set each listener's address.
var listenFlags = map[node.Listener]string{node.ListenerMesh: "--listen", node.ListenerData: "--data-listen", node.ListenerAPI: "--api"}

// withListenFlag turns a listener's address-in-use error into one that names the flag to
// change; other errors are returned unchanged.
func withListenFlag(err error) error {
	var e *node.AddrInUseError
	if !errors.As(err, &e) {
		return err
	}
	return fmt.Errorf("%w: choose another address with %s", e, listenFlags[e.Listener])
}

// finish turns the string flags into configuration and fills in what depends on others.
func (o *joinOptions) finish() error {
	c := &o.cfg
	c.Version = Version
	level, err := parseLogLevel(o.logLevel)
	if err != nil {
		return err
	}
	c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if c.JoinSecret == "" && len(c.Allow) == 0 {
		return usagef("no join secret: pass --join-secret or set MESHNODE_JOIN_SECRET (`meshnode init` makes one)")
	}
	if c.JoinSecret != "" && len(c.JoinSecret) < mesh.MinSecretLen {
		return usagef("join secret is %d characters: use at least %d (`meshnode init` makes one)", len(c.JoinSecret), mesh.MinSecretLen)
	}
	if err := mesh.ValidateMeshName(c.Mesh); err != nil {
		return usagef("--mesh: %v", err)
	}
	if strings.HasSuffix(o.memoryBudget, "%") {
		pct, err := strconv.ParseFloat(strings.TrimSuffix(o.memoryBudget, "%"), 64)
		if err != nil || pct <= 0 || pct > 100 {
			return usagef("--memory-budget %q: a share must be in (0%%, 100%%]", o.memoryBudget)
		}
		c.MemoryBudgetFraction, c.MemoryBudget = pct/100, 0
	} else if c.MemoryBudget, err = parseSize(o.memoryBudget); err != nil {
		return usagef("--memory-budget: %v", err)
	}
	probeMax, err := parseSize(o.probeMax)
	if err != nil {
		return usagef("--probe-max-bytes: %v", err)
	}
	c.Probe.MaxBytes = int(min(probeMax, 1<<40))
	relayBytes, err := parseSize(o.relayBytes)
	if err != nil {
		return usagef("--relay-circuit-bytes: %v", err)
	}
	c.Relay.CircuitBytes = int64(min(relayBytes, 1<<50))
	maxData, err := parseSize(o.maxData)
	if err != nil || maxData == 0 {
		return usagef("--max-data-bytes %q: want a size such as 1GiB", o.maxData)
	}
	c.MaxDataBytes = int64(min(maxData, 1<<50))
	if c.LocalData, err = node.ParseLocalData(o.localData); err != nil {
		return usageError{err: err}
	}
	switch {
	case c.DatasetReplicas < 0:
		return usagef("--dataset-replicas: must be ≥ 0 (got %d)", c.DatasetReplicas)
	case c.DatasetReplicas == 0:
		c.DatasetReplicas = -1 // the flag's 0 is "none"; the configuration's 0 is the default
	}
	if _, err := fmt.Sscanf(o.gemmShape, "%dx%dx%d", &c.Profile.GemmM, &c.Profile.GemmN, &c.Profile.GemmK); err != nil ||
		c.Profile.GemmM <= 0 || c.Profile.GemmN <= 0 || c.Profile.GemmK <= 0 {
		return usagef("--gemm-shape %q: want MxNxK with positive sizes, e.g. 2048x512x512", o.gemmShape)
	}
	if o.threads < 0 {
		return usagef("--threads must be ≥ 0 (got %d)", o.threads)
	}
	c.Profile.Threads = o.threads
	return nil
}

func parseLogLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, usagef("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// parseSize reads a byte count: a plain number or one with a unit (KB, MB, GB, TB: powers
// of 1000; KiB, MiB, GiB, TiB: powers of 1024).
func parseSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), 1.0
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || v*mult >= 1<<63 {
		return 0, fmt.Errorf("%q is not a size (e.g. 8GiB, 512MiB, 1000000)", s)
	}
	return uint64(v * mult), nil
}
