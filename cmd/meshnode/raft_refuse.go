package main

import (
	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

func newRaftRefuseCmd() *cobra.Command {
	o := &raftDecisionOptions{}
	cmd := &cobra.Command{
		Use:   "refuse ID",
		Short: "Keep a non-voter from ever being promoted to voter automatically",
		Long: `Refuse a non-voter's promotion: the leader never promotes it, whatever its probation,
until an operator runs 'meshnode raft promote ID'. It stays a non-voter: it keeps
receiving the log and may train. The local node must be a voter.`,
		Example: `  meshnode raft refuse 12D3KooW... -o json   # {"id":..,"decision":"refused","suffrage":"nonvoter"}`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, "refuse", args[0], (*api.Client).Refuse)
		},
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return cmd
}
