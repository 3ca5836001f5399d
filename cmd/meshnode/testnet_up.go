package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/testnet"
)

type testnetUpOptions struct {
	topo    topologyOptions
	dir     string
	timeout time.Duration
	output  string
}

func newTestnetUpCmd() *cobra.Command {
	o := &testnetUpOptions{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a testnet and leave it running",
		Long: `Start a testnet in --dir and return once every node sees the others and a Raft leader is
elected. The nodes and the WAN relays are owned by a detached supervisor process
(` + "`meshnode testnet supervise`" + `, logging to DIR/supervisor.log) that outlives this command;
DIR/testnet.json describes the testnet for ` + "`status`, `kill`, `partition` and `down`" + `.
Submit jobs to any node's API: ` + "`meshnode submit job.yaml --api <api>`" + `.`,
		Example: `  meshnode testnet up --nodes 3 --dir /tmp/tn
  meshnode testnet up --topology geo.yaml -o json
  meshnode testnet down --dir /tmp/tn`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	addTopologyFlags(cmd, &o.topo)
	addDirFlag(cmd, &o.dir)
	cmd.Flags().DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the testnet to be ready")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func (o *testnetUpOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	cfg, err := o.topo.config(cmd, o.dir)
	if err != nil {
		return err
	}
	args := []string{"testnet", "supervise", "--dir", cfg.Dir, "--heartbeat", cfg.Heartbeat.String(),
		"--node-log-level", cfg.LogLevel, "--timeout", o.timeout.String()}
	if o.topo.file != "" {
		args = append(args, "--topology", o.topo.file)
	} else {
		args = append(args, "--nodes", strconv.Itoa(o.topo.nodes))
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout+10*time.Second)
	defer cancel()
	st, err := testnet.StartSupervisor(ctx, cfg.Binary, args, cfg.Dir)
	if err != nil {
		return err
	}
	return printTestnetState(cmd, st, o.output)
}

// newTestnetSuperviseCmd is the hidden process `up` leaves behind.
func newTestnetSuperviseCmd() *cobra.Command {
	o := &testnetUpOptions{}
	cmd := &cobra.Command{
		Use:    "supervise",
		Short:  "Own a testnet's nodes and relays until `testnet down` (started by `testnet up`)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.topo.config(cmd, o.dir)
			if err != nil {
				return err
			}
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
			return testnet.Supervise(cmd.Context(), cfg, o.timeout)
		},
	}
	addTopologyFlags(cmd, &o.topo)
	addDirFlag(cmd, &o.dir)
	cmd.Flags().DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the testnet to be ready")
	return cmd
}

// printTestnetState prints a testnet's state: JSON, or a table for people.
func printTestnetState(cmd *cobra.Command, st testnet.State, output string) error {
	w := cmd.OutOrStdout()
	if output == "json" {
		writeJSONLine(w, st)
		return nil
	}
	fmt.Fprintf(w, "testnet in %s", st.Dir)
	if st.Supervisor > 0 {
		fmt.Fprintf(w, " (supervisor pid %d)", st.Supervisor)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-8s %-8s %-6s %-8s %-7s %-21s %s\n", "NAME", "REGION", "SLOW", "PID", "STATE", "API", "ID")
	for _, n := range st.Nodes {
		state := "running"
		if !n.Alive {
			state = "down"
		}
		fmt.Fprintf(w, "%-8s %-8s %-6g %-8d %-7s %-21s %s\n", n.Name, n.Region, n.Slowdown, n.PID, state, n.API, n.ID)
	}
	for _, p := range st.Partitions {
		fmt.Fprintf(w, "partition: %s ✕ %s\n", p[0], p[1])
	}
	printCLIHint(w, st)
	return nil
}

// printCLIHint tells how to point the CLI at a running node of the testnet: its data dir
// holds the API address and token.
func printCLIHint(w io.Writer, st testnet.State) {
	for _, n := range st.Nodes {
		if n.Alive {
			fmt.Fprintf(w, "use the CLI against %s: export %s=%s  (then: meshnode status, meshnode submit job.yaml, ...)\n",
				n.Name, api.EnvDataDir, n.DataDir)
			if tok, err := api.ReadToken(n.DataDir); err == nil {
				fmt.Fprintf(w, "dashboard of %s: http://%s/#token=%s\n", n.Name, n.API, tok)
			}
			return
		}
	}
}
