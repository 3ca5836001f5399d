package node

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/mesh"
	"github.com/meshnode/meshnode/mesh/dataplane"
	"github.com/meshnode/meshnode/node/fingerprint"
)

// DefaultAPIAddr is where the local HTTP API listens unless told otherwise.
const DefaultAPIAddr = api.DefaultAddr

// DefaultMaxDataBytes caps one local data file of a submitted job (see Config.MaxDataBytes).
const DefaultMaxDataBytes = 1 << 30

// Config is everything a Node needs. Start from DefaultConfig.
type Config struct {
	// DataDir holds the identity key and the node's state. Required.
	DataDir string
	// Mesh names the mesh to join. Empty means "default".
	Mesh string
	// JoinSecret is the mesh's shared secret (see `meshnode init`). Required unless
	// Allow is set.
	JoinSecret string
	// Allow, when non-empty, lists the only peer IDs admitted.
	Allow []string
	// Listen lists libp2p multiaddrs to listen on. Empty means QUIC-v1 and TCP on
	// mesh.DefaultPort on every interface.
	Listen []string
	// Bootstrap lists multiaddrs (ending in /p2p/<id>) of members to join through.
	Bootstrap []string
	// MDNS, DHT and NAT switch LAN discovery, DHT rendezvous and NAT traversal; all on in
	// DefaultConfig, off in the zero value.
	MDNS, DHT, NAT bool
	// HostLabel names this node's machine in its profile in place of the machine's ids
	// (fingerprint.Config.HostLabel): nodes that share a label are priced as sharing one
	// machine's cores.
	HostLabel string
	// Relay bounds the circuit relay this node runs for other members with NAT on; zero
	// fields take mesh.RelayConfig's defaults.
	Relay mesh.RelayConfig
	// API is the host:port of the local HTTP API; the host must be a loopback address.
	// Port 0 picks a free port (see Node.APIAddr). Empty disables the API.
	API string
	// APIHosts lists extra Host header values (host:port) the API accepts besides
	// 127.0.0.1, localhost and [::1] with its port, e.g. a name a local proxy uses.
	// Requests for any other Host are refused, against DNS rebinding. Empty adds none.
	APIHosts []string
	// DataRoots lists directories whose regular files a job submitted here may name as
	// local data (data.source, data.train, data.val), besides the directory the submitting
	// CLI runs in (sent with the request). Empty adds none.
	DataRoots []string
	// MaxDataBytes caps the size of one local data file. Zero means DefaultMaxDataBytes.
	MaxDataBytes int64
	// DatasetReplicas is how many live members besides this node must hold the dataset of
	// a job submitted here before the submit answers, so that the job outlives this node.
	// Zero means DefaultDatasetReplicas (1); negative, none.
	DatasetReplicas int

	// Heartbeat, SuspectAfter, DeadAfter and AuthTimeout are passed to the mesh; zero
	// means the mesh's defaults (2 s, 3 and 5 heartbeats, 5 s).
	Heartbeat, SuspectAfter, DeadAfter, AuthTimeout time.Duration
	// DiscoveryInterval is how often bootstrap peers are retried and the DHT queried.
	// Zero means the mesh's default (30 s).
	DiscoveryInterval time.Duration
	// Probe configures the link probes; zero fields mean the mesh's defaults.
	Probe mesh.ProbeConfig

	// Reprofile is how often the device profile is measured again. Zero means 10 min;
	// negative means only at start.
	Reprofile time.Duration
	// MemoryBudget is the memory offered to training, in bytes. Zero means
	// MemoryBudgetFraction of the memory available at measurement time.
	MemoryBudget uint64
	// MemoryBudgetFraction is used when MemoryBudget is zero. Zero means 0.8.
	MemoryBudgetFraction float64
	// Profile configures the GEMM measurement.
	Profile ProfileConfig

	// Consensus configures the Raft control plane; the zero value runs it with defaults.
	Consensus ConsensusConfig

	// DataListen is the UDP host:port of the tensor data plane. Empty means
	// dataplane.DefaultPort on every interface; port 0 picks a free port.
	DataListen string
	// DataAdvertise is the only data-plane address announced to peers (host:port).
	// Empty means the bound address, or for an unspecified host every up interface's
	// addresses and those peers observe, loopback last (DataAddrs); a testnet points it at
	// the WAN relay in front of the node.
	DataAdvertise string
	// Region labels where the node is; it travels in the profile.
	Region string
	// LocalData maps the names of the local datasets this node's operator exposes
	// (--local-data NAME=PATH) to their paths: a job with data.local NAME trains here on
	// PATH, which never leaves the node; the names travel in the profile, the paths do not.
	// A path is a sharded corpus directory, a directory holding train.bin and val.bin, or
	// a text file. Empty exposes none: no spec can make the node read a local file.
	LocalData map[string]string

	// Version is the meshnode release reported in the profile and the API.
	Version string
	// Logger receives the node's logs. Nil discards them.
	Logger *slog.Logger

	// profilerHook, set by this package's tests, adjusts the profiler New creates.
	profilerHook func(*fingerprint.Profiler)
	// speedProofTarget, set by this package's tests, is how long the leader's challenges
	// take at a member's claim (zero: speedProofTarget, 300 ms).
	speedProofTarget time.Duration
	// speedProofSlack, set by this package's tests, multiplies what members proved before
	// it caps their claims (zero: ProofSlack). In-process test nodes all claim one quiet
	// measurement (shareFirstMeasurement) and prove what their shared, loaded CPU gives:
	// tests of other features would otherwise plan on the leader alone.
	speedProofSlack float64
	// speedRetry, set by this package's tests, is the least time before the leader
	// challenges a member again after a late answer or a proof its new claim outgrew
	// (zero: speedRetry, 30 s, the prover's interval per leader).
	speedRetry time.Duration
	// speedProver, set by this package's tests, answers this node's speed challenges in
	// place of its prover from the start (a member slower than its claim).
	speedProver network.StreamHandler
}

// ProfileConfig configures the GEMM and training-step measurements of the device profile
// (package fingerprint measures it).
type ProfileConfig = fingerprint.ComputeConfig

// DefaultConfig returns the configuration `meshnode join` starts from.
func DefaultConfig() Config {
	return Config{
		DataDir: DefaultDataDir(), Mesh: "default",
		MDNS: true, DHT: true, NAT: true,
		API:                  DefaultAPIAddr,
		Heartbeat:            2 * time.Second,
		AuthTimeout:          5 * time.Second,
		DiscoveryInterval:    30 * time.Second,
		Reprofile:            10 * time.Minute,
		MemoryBudgetFraction: 0.8,
		DataListen:           fmt.Sprintf(":%d", dataplane.DefaultPort),
		Profile:              ProfileConfig{GemmM: 2048, GemmN: 512, GemmK: 512, BatchDuration: 300 * time.Millisecond, Slowdown: 1},
	}
}

// DefaultDataDir is ~/.meshnode, or ./.meshnode when there is no home directory.
func DefaultDataDir() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".meshnode")
	}
	return ".meshnode"
}

// Validate reports the first problem with c in words a user can act on. It checks
// everything that can be checked without touching the network or the disk.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("data dir: required (--data-dir)")
	}
	for _, s := range c.Listen {
		if _, err := ma.NewMultiaddr(s); err != nil {
			return fmt.Errorf("listen address %q: %w", s, err)
		}
	}
	if _, err := mesh.ParseBootstrap(c.Bootstrap); err != nil {
		return err
	}
	if _, err := c.allowPeers(); err != nil {
		return err
	}
	if err := validateAPIAddr(c.API); err != nil {
		return err
	}
	if err := validateLocalData(c.LocalData); err != nil {
		return err
	}
	if err := c.validateAPIAccess(); err != nil {
		return err
	}
	if c.DataAdvertise != "" {
		if err := mesh.ValidDataAddr(c.DataAdvertise); err != nil {
			return fmt.Errorf("--data-advertise: %w (want host:port, e.g. 203.0.113.7:4243)", err)
		}
	}
	for _, l := range []struct {
		flag string
		bad  bool
	}{
		{"--relay-reservations", c.Relay.MaxReservations < 0},
		{"--relay-circuits", c.Relay.MaxCircuits < 0},
		{"--relay-circuit-bytes", c.Relay.CircuitBytes < 0},
		{"--relay-circuit-duration", c.Relay.CircuitDuration < 0},
	} {
		if l.bad {
			return fmt.Errorf("%s must be ≥ 0 (0: the default)", l.flag)
		}
	}
	if c.MemoryBudgetFraction < 0 || c.MemoryBudgetFraction > 1 {
		return fmt.Errorf("memory budget fraction must be in (0, 1] (got %v)", c.MemoryBudgetFraction)
	}
	return c.Profile.Validate()
}

func validateAPIAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("API address %q: %w (want host:port, e.g. %s)", addr, err, DefaultAPIAddr)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("API address %q: the API is plain HTTP, so it listens on loopback only (e.g. %s)", addr, DefaultAPIAddr)
	}
	return nil
}

func (c Config) allowPeers() ([]peer.ID, error) {
	var out []peer.ID
	for _, s := range c.Allow {
		id, err := peer.Decode(s)
		if err != nil {
			return nil, fmt.Errorf("--allow %q: not a peer ID (`meshnode id` prints one): %w", s, err)
		}
		out = append(out, id)
	}
	return out, nil
}

func (c Config) reprofile() time.Duration {
	if c.Reprofile == 0 {
		return 10 * time.Minute
	}
	return c.Reprofile
}

// meshConfig translates c into the mesh's configuration.
func (c Config) meshConfig() (mesh.Config, error) {
	mc := mesh.DefaultConfig()
	mc.Mesh, mc.JoinSecret = c.Mesh, c.JoinSecret
	mc.MDNS, mc.DHT, mc.NAT = c.MDNS, c.DHT, c.NAT
	mc.Relay = c.Relay
	mc.HeartbeatInterval, mc.SuspectAfter, mc.DeadAfter = c.Heartbeat, c.SuspectAfter, c.DeadAfter
	mc.AuthTimeout, mc.DiscoveryInterval, mc.Probe = c.AuthTimeout, c.DiscoveryInterval, c.Probe
	var err error
	if mc.AllowPeers, err = c.allowPeers(); err != nil {
		return mc, err
	}
	if mc.Bootstrap, err = mesh.ParseBootstrap(c.Bootstrap); err != nil {
		return mc, err
	}
	for _, s := range c.Listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return mc, fmt.Errorf("listen address %q: %w", s, err)
		}
		mc.ListenAddrs = append(mc.ListenAddrs, a)
	}
	return mc, nil
}

func (c Config) validateAPIAccess() error {
	for _, h := range c.APIHosts {
		if _, _, err := net.SplitHostPort(h); err != nil {
			return fmt.Errorf("--api-host %q: want host:port as a client sends it in Host: %w", h, err)
		}
	}
	for _, d := range c.DataRoots {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("--data-root %q: must be an absolute directory", d)
		}
	}
	if c.MaxDataBytes < 0 {
		return fmt.Errorf("max data bytes must be ≥ 0 (got %d)", c.MaxDataBytes)
	}
	return nil
}
