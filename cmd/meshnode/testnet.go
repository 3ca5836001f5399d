package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/testnet"
)

// newTestnetCmd is `meshnode testnet`: a local multi-node testnet of real processes
// (docs/testnet.md). Each subcommand lives in its own testnet_*.go file.
func newTestnetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "testnet",
		Short: "Run a local testnet: several real nodes on loopback with emulated slow devices and WAN links",
		Long: `A testnet is N ` + "`meshnode join`" + ` processes of this binary on loopback, each with its own data
directory under --dir, an emulated slowdown and memory budget, and a userspace UDP relay in
front of its tensor data plane that emulates the WAN links between regions (latency,
bandwidth cap, loss). No root is needed.

  testnet run        start one, train the default job, print a summary, shut down
  testnet up         start one and leave it running (a detached supervisor owns it)
  testnet status     show a running testnet
  testnet kill NODE  SIGKILL one node
  testnet partition A B   cut the control and data planes between two nodes or regions
  testnet down       stop it; no process is left behind`,
	}
	cmd.AddCommand(newTestnetRunCmd(), newTestnetUpCmd(), newTestnetSuperviseCmd(), newTestnetStatusCmd(),
		newTestnetKillCmd(), newTestnetPartitionCmd(), newTestnetSlowCmd(), newTestnetDownCmd())
	return cmd
}

// topologyOptions are the flags that shape a testnet.
type topologyOptions struct {
	nodes     int
	file      string
	heartbeat time.Duration
	logLevel  string
}

func addTopologyFlags(cmd *cobra.Command, o *topologyOptions) {
	f := cmd.Flags()
	f.IntVar(&o.nodes, "nodes", 4, "number of nodes of the default topology (2 regions, slowdowns 1, 1, 2, 3, …)")
	f.StringVar(&o.file, "topology", "", "topology YAML file (nodes, regions, links; see docs/testnet.md); overrides --nodes")
	f.DurationVar(&o.heartbeat, "heartbeat", 500*time.Millisecond, "the nodes' heartbeat interval (dead after 6)")
	f.StringVar(&o.logLevel, "node-log-level", "info", "the nodes' log level (logs: DIR/<node>/node.log)")
}

// topology builds the topology from --topology or --nodes.
func (o *topologyOptions) topology(cmd *cobra.Command) (testnet.Topology, error) {
	if o.file != "" {
		if cmd.Flags().Changed("nodes") {
			return testnet.Topology{}, usagef("--nodes and --topology: give one of them")
		}
		b, err := os.ReadFile(o.file)
		if err != nil {
			return testnet.Topology{}, usagef("--topology: %v", err)
		}
		t, err := testnet.ParseTopology(b)
		if err != nil {
			return t, usagef("%s: %v", o.file, err)
		}
		return t, nil
	}
	if o.nodes < 1 || o.nodes > 64 {
		return testnet.Topology{}, usagef("--nodes: must be from 1 to 64 (got %d)", o.nodes)
	}
	t := testnet.DefaultTopology(o.nodes)
	return t, t.Validate()
}

// config is the testnet configuration of these flags for the running binary.
func (o *topologyOptions) config(cmd *cobra.Command, dir string) (testnet.Config, error) {
	topo, err := o.topology(cmd)
	if err != nil {
		return testnet.Config{}, err
	}
	bin, err := os.Executable()
	if err != nil {
		return testnet.Config{}, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return testnet.Config{}, err
	}
	return testnet.Config{Binary: bin, Dir: abs, Topology: topo, Heartbeat: o.heartbeat, LogLevel: o.logLevel}, nil
}

// defaultTestnetDir is where `up` and the commands that follow it keep the testnet: in the
// user's cache directory, else a per-user name in the temporary directory (created 0700 and
// refused if another user made it first: testnet.PrivateDir).
func defaultTestnetDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "meshnode", "testnet")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("meshnode-testnet-%d", os.Getuid()))
}

func addDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "dir", defaultTestnetDir(), "testnet directory (node data dirs, logs, testnet.json)")
}
