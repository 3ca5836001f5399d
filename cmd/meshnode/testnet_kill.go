package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/testnet"
)

func newTestnetKillCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "kill NODE",
		Short: "SIGKILL one node of a running testnet",
		Long: `Kill a node of the testnet in --dir with SIGKILL, as a crash would: it announces nothing, and
its peers find it dead after missing heartbeats. Its relay stays up.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := testnet.LoadState(dir)
			if err != nil {
				return err
			}
			if _, ok := st.Node(args[0]); !ok {
				return usagef("kill: no node %q in the testnet in %s", args[0], dir)
			}
			if err := testnet.KillNode(cmd.Context(), st, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "killed %s\n", args[0])
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	return withEnv(cmd)
}
