package testnet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/node"
)

// Config is how to run a testnet.
type Config struct {
	// Binary is the meshnode executable to run (the CLI passes os.Executable()). Required.
	Binary string
	// Dir holds the testnet: one data directory per node (Dir/<name>, with node.log) and
	// StateFile. Required; created if missing. Node directories left by an earlier
	// testnet in Dir are reset.
	Dir string
	// Topology is the nodes and links; it must validate. Required.
	Topology Topology
	// Mesh is the mesh name; empty means "testnet".
	Mesh string
	// Heartbeat is the nodes' heartbeat interval; 0 means 500ms.
	Heartbeat time.Duration
	// DeadAfter is when a silent peer is dead; 0 means 6 heartbeats.
	DeadAfter time.Duration
	// StartTimeout bounds the start of each node (profiling included); 0 means 60s.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL; 0 means 10s.
	StopTimeout time.Duration
	// LogLevel is the nodes' --log-level; empty means "info".
	LogLevel string
	// ExtraArgs are appended to every node's `meshnode join` command line.
	ExtraArgs []string
	// Logger receives the testnet's own logs; nil discards them.
	Logger *slog.Logger
}

func (c *Config) fill() error {
	if c.Binary == "" {
		return errors.New("testnet: Config.Binary (the meshnode executable) is required")
	}
	if c.Dir == "" {
		return errors.New("testnet: Config.Dir is required")
	}
	if err := c.Topology.Validate(); err != nil {
		return err
	}
	if c.Mesh == "" {
		c.Mesh = "testnet"
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 500 * time.Millisecond
	}
	if c.DeadAfter <= 0 {
		c.DeadAfter = 6 * c.Heartbeat
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 10 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Testnet is a running set of meshnode processes with a relay in front of each one's data
// plane. Its methods are safe for concurrent use.
type Testnet struct {
	cfg    Config
	secret string
	net    *Network

	mu      sync.Mutex
	nodes   []*Node
	control string
	super   int
	stopped bool
}

// New checks cfg and prepares a testnet; Start runs it.
func New(cfg Config) (*Testnet, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = abs
	secret := make([]byte, 32)
	rand.Read(secret)
	return &Testnet{cfg: cfg, secret: base64.RawURLEncoding.EncodeToString(secret), net: NewNetwork(cfg.Topology)}, nil
}

// Dir is the testnet's directory.
func (t *Testnet) Dir() string { return t.cfg.Dir }

// Network is the emulated WAN, for partitions and link counters.
func (t *Testnet) Network() *Network { return t.net }

// Nodes returns the nodes in topology order (only those started so far).
func (t *Testnet) Nodes() []*Node {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Node(nil), t.nodes...)
}

// Node returns the node called name.
func (t *Testnet) Node(name string) (*Node, error) {
	for _, n := range t.Nodes() {
		if n.Spec.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("node %q: %w", name, ErrUnknownName)
}

// Start starts every node in topology order, each after the previous one wrote its
// runtime file (so that profiling runs undisturbed and node 0 can bootstrap the rest),
// and saves StateFile. On error, the nodes started so far keep running: call Stop.
func (t *Testnet) Start(ctx context.Context) error {
	if err := t.prepareDir(); err != nil {
		return err
	}
	var bootstrap []string
	for i, spec := range t.cfg.Topology.Nodes {
		n, err := t.startNode(ctx, spec, bootstrap)
		if n != nil {
			t.mu.Lock()
			t.nodes = append(t.nodes, n)
			t.mu.Unlock()
		}
		if err != nil {
			return err
		}
		if i == 0 {
			bootstrap = n.Addrs
		}
		t.cfg.Logger.Info("node started", "name", spec.Name, "id", n.ID, "api", n.API, "pid", n.PID())
	}
	return t.SaveState()
}

// prepareDir creates the testnet directory (private: PrivateDir) and resets node
// directories an earlier testnet left, refusing if that testnet still runs.
func (t *Testnet) prepareDir() error {
	if err := PrivateDir(t.cfg.Dir); err != nil {
		return err
	}
	if old, err := LoadState(t.cfg.Dir); err == nil {
		for _, n := range old.Nodes {
			if n.Alive && processAlive(n.PID, n.DataDir) {
				return fmt.Errorf("a testnet still runs in %s (node %s, pid %d): run `meshnode testnet down --dir %s` first",
					t.cfg.Dir, n.Name, n.PID, t.cfg.Dir)
			}
		}
	}
	for _, spec := range t.cfg.Topology.Nodes {
		if err := os.RemoveAll(filepath.Join(t.cfg.Dir, spec.Name)); err != nil {
			return fmt.Errorf("reset %s: %w", spec.Name, err)
		}
	}
	return nil
}

// startNode opens the relay, starts the process and waits for its runtime file.
func (t *Testnet) startNode(ctx context.Context, spec NodeSpec, bootstrap []string) (*Node, error) {
	relay, err := NewRelay(t.net, spec.Name, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := &Node{Spec: spec, DataDir: filepath.Join(t.cfg.Dir, spec.Name), Relay: relay}
	if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
		relay.Close()
		return nil, err
	}
	env := t.env()
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	if err := n.start(t.cfg.Binary, t.joinArgs(n, bootstrap), env); err != nil {
		relay.Close()
		return nil, err
	}
	info, err := n.waitRuntime(ctx, t.cfg.StartTimeout)
	if err != nil {
		return n, err
	}
	data, err := netip.ParseAddrPort(info.DataAddr)
	if err != nil {
		return n, fmt.Errorf("node %s: data_addr %q in %s: %w (does `meshnode join` support --data-listen?)",
			spec.Name, info.DataAddr, api.RuntimeFile, err)
	}
	if err := t.net.SetAddr(spec.Name, data); err != nil {
		return n, err
	}
	relay.SetTarget(data)
	n.ID, n.API, n.Addrs, n.DataAddr = info.ID, info.API, info.Addrs, info.DataAddr
	return n, n.connect()
}

// joinArgs is the command line of a node: loopback and ephemeral ports everywhere, no
// discovery beyond the bootstrap node, fast heartbeats, the node's emulation settings.
func (t *Testnet) joinArgs(n *Node, bootstrap []string) []string {
	s := n.Spec
	args := []string{"join",
		"--data-dir", n.DataDir,
		"--mesh", t.cfg.Mesh,
		"--listen", "/ip4/127.0.0.1/udp/0/quic-v1,/ip4/127.0.0.1/tcp/0",
		"--api", "127.0.0.1:0",
		"--mdns=false", "--dht=false", "--nat=false",
		"--heartbeat", t.cfg.Heartbeat.String(),
		"--dead-after", t.cfg.DeadAfter.String(),
		"--discovery-interval", "2s",
		"--raft-probation", "2s", // a local testnet's voters within seconds
		"--reprofile=-1s",
		"--slowdown", fmt.Sprint(s.Slowdown),
		"--region", s.Region,
		"--data-listen", "127.0.0.1:0",
		"--data-advertise", n.Relay.Addr().String(),
		"--log-level", t.cfg.LogLevel,
	}
	if s.Memory != "" {
		args = append(args, "--memory-budget", s.Memory)
	}
	if s.Threads > 0 {
		args = append(args, "--threads", fmt.Sprint(s.Threads))
	}
	for _, d := range s.LocalData {
		args = append(args, "--local-data", d)
	}
	if len(bootstrap) > 0 {
		args = append(args, "--bootstrap", strings.Join(bootstrap, ","))
	}
	return append(args, t.cfg.ExtraArgs...)
}

// env passes the join secret through the environment (command lines are visible to other
// users) and clears MESHNODE_* variables that would override the testnet's flags' defaults.
func (t *Testnet) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MESHNODE_") {
			env = append(env, kv)
		}
	}
	return append(env, "MESHNODE_JOIN_SECRET="+t.secret, node.PartitionHookEnv+"=1")
}

// Kill sends SIGKILL to a node and waits until it is gone. Its relay stays up.
func (t *Testnet) Kill(name string) error {
	n, err := t.Node(name)
	if err != nil {
		return err
	}
	n.kill()
	return t.SaveState()
}

// WaitFor polls cond until it holds or timeout passes. It is how tests and commands wait:
// never a fixed sleep.
func (t *Testnet) WaitFor(cond func() bool, timeout time.Duration) error {
	return WaitFor(context.Background(), cond, timeout)
}

// WaitFor polls cond every 100ms until it holds, ctx ends or timeout passes.
func WaitFor(ctx context.Context, cond func() bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("condition not met within %s", timeout)
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Stop ends every node (SIGTERM, then SIGKILL after StopTimeout), closes the relays and
// the network, and saves the final state. No process of the testnet survives it.
func (t *Testnet) Stop() error {
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		return nil
	}
	t.stopped = true
	nodes := append([]*Node(nil), t.nodes...)
	t.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.stop(t.cfg.StopTimeout) })
	}
	wg.Wait()
	for _, n := range nodes {
		n.Relay.Close()
	}
	t.net.Close()
	return t.SaveState()
}

// SetSupervisor records the supervisor's PID and control address in the state.
func (t *Testnet) SetSupervisor(pid int, control string) error {
	t.mu.Lock()
	t.super, t.control = pid, control
	t.mu.Unlock()
	return t.SaveState()
}

// State describes the testnet as StateFile holds it.
func (t *Testnet) State() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := State{Dir: t.cfg.Dir, Nodes: []NodeState{}, Supervisor: t.super, Control: t.control, Partitions: t.net.Partitions()}
	for _, n := range t.nodes {
		s.Nodes = append(s.Nodes, n.state())
	}
	return s
}

// SaveState writes State to Dir/StateFile.
func (t *Testnet) SaveState() error {
	s := t.State()
	return s.Save(t.cfg.Dir)
}
