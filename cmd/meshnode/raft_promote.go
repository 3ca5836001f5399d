package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

// raftDecisionOptions are the options of `raft promote` and `raft refuse`.
type raftDecisionOptions struct {
	api    apiOptions
	output string
}

func newRaftPromoteCmd() *cobra.Command {
	o := &raftDecisionOptions{}
	cmd := &cobra.Command{
		Use:   "promote ID",
		Short: "Approve a non-voter's promotion to voter without waiting for its probation",
		Long: `Approve a non-voter's promotion: it becomes a voter now if it is caught up and a voter
seat is free (--voters), otherwise at the next free seat. Without an approval the leader
promotes a non-voter only after it has stayed alive in the group for its probation.
The local node must be a voter: non-voters cannot decide promotions.`,
		Example: `  meshnode raft promote 12D3KooW... -o json   # {"id":..,"decision":"approved","suffrage":"voter"}`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd, "promote", args[0], (*api.Client).Promote)
		},
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *raftDecisionOptions) run(cmd *cobra.Command, verb, id string,
	decide func(*api.Client, context.Context, string) (api.PromotionResult, error)) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	res, err := decide(c, cmd.Context(), id)
	if err != nil {
		return fmt.Errorf("raft %s %s: %w", verb, id, err)
	}
	w := cmd.OutOrStdout()
	if o.output == "json" {
		return writeJSON(w, res)
	}
	fmt.Fprintf(w, "%s: %s, now a %s\n", res.ID, res.Decision, res.Suffrage)
	if res.Note != "" {
		fmt.Fprintln(w, res.Note)
	}
	return nil
}
