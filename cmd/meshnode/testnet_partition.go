package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/testnet"
)

func newTestnetPartitionCmd() *cobra.Command {
	var dir string
	var heal bool
	cmd := &cobra.Command{
		Use:   "partition A B",
		Short: "Cut the control and data planes between two nodes or regions (--heal to restore them)",
		Long: `Cut A from B, each a node or a region name, in both directions: the relays drop every
tensor data-plane packet between them, and each node refuses and closes its libp2p
connections to the other side (heartbeats, Raft, blobs), through a test-only hook of the
testnet's nodes. --heal restores both; the nodes reconnect within a discovery interval.`,
		Example: `  meshnode testnet partition eu us
  meshnode testnet partition node0 node3 --heal`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := testnet.LoadState(dir)
			if err != nil {
				return err
			}
			if st.Control == "" {
				return fmt.Errorf("the testnet in %s has no supervisor: partitions need one (`meshnode testnet up`)", dir)
			}
			parts, err := testnet.NewControlClient(st.Control).Partition(cmd.Context(), args[0], args[1], heal)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(parts) == 0 {
				fmt.Fprintln(w, "no partitions")
			}
			for _, p := range parts {
				fmt.Fprintf(w, "partition: %s ✕ %s\n", p[0], p[1])
			}
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().BoolVar(&heal, "heal", false, "restore the links instead of cutting them")
	return withEnv(cmd)
}
