package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

func newRaftCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "raft",
		Short: "Inspect the mesh's Raft group and decide non-voters' promotion",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("raft: name a subcommand: status, promote, refuse")
		},
	}
	cmd.AddCommand(newRaftStatusCmd(), newRaftPromoteCmd(), newRaftRefuseCmd())
	return cmd
}

type raftStatusOptions struct {
	api    apiOptions
	output string
}

func newRaftStatusCmd() *cobra.Command {
	o := &raftStatusOptions{}
	cmd := &cobra.Command{
		Use:     "status",
		Short:   "Show the Raft leader, term, voters and non-voters as the local node sees them",
		Example: `  meshnode raft status -o json   # {"leader":..,"term":..,"voters":[..],"nonvoters":[..],"applied_index":..}`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *raftStatusOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	st, err := c.Raft(cmd.Context())
	if err != nil {
		return fmt.Errorf("raft status: %w", err)
	}
	w := cmd.OutOrStdout()
	if o.output == "json" {
		return writeJSON(w, st)
	}
	leader := st.Leader
	if leader == "" {
		leader = "(none)"
	}
	fmt.Fprintf(w, "node       %s (%s)\nleader     %s\nterm       %d\napplied    %d\n", st.ID, strings.ToLower(st.State), leader, st.Term, st.AppliedIndex)
	fmt.Fprintf(w, "voters     %s\nnonvoters  %s\n", strings.Join(st.Voters, ", "), strings.Join(st.Nonvoters, ", "))
	return nil
}
