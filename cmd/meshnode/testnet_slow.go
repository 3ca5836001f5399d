package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/testnet"
)

func newTestnetSlowCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "slow NODE FACTOR",
		Short: "Change a running node's emulated slowdown (1 turns it off)",
		Long: `Make NODE's kernels take FACTOR× their time from now on, through a test-only hook of the
testnet's nodes, as a throttled or shared device would: the node's announced profile keeps
the rates it measured, so only its steps show the change, and the leader's straggler
detector re-plans the job (docs/balancer.md, calibration). FACTOR 1 turns it off.`,
		Example: `  meshnode testnet slow node1 4
  meshnode testnet slow node1 1`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			factor, err := strconv.ParseFloat(args[1], 64)
			if err != nil {
				return fmt.Errorf("FACTOR %q: a number ≥ 1, e.g. 4", args[1])
			}
			if err := testnet.SlowNode(cmd.Context(), dir, args[0], factor); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: slowdown %g\n", args[0], factor)
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	return withEnv(cmd)
}
