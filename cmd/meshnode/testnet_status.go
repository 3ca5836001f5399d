package main

import (
	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/testnet"
)

type testnetStatusOptions struct {
	dir    string
	output string
}

func newTestnetStatusCmd() *cobra.Command {
	o := &testnetStatusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a testnet's nodes: region, slowdown, PID, state, API",
		Long: `Show the testnet in --dir as DIR/testnet.json describes it, with each node's state checked
against its process (a node whose process is gone shows "down").`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			st, err := testnet.LoadState(o.dir)
			if err != nil {
				return err
			}
			st = testnet.Refresh(st)
			return printTestnetState(cmd, st, o.output)
		},
	}
	addDirFlag(cmd, &o.dir)
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}
