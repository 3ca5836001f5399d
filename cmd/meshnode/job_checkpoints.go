package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

type jobCheckpointsOptions struct {
	api    apiOptions
	output string
}

func newJobCheckpointsCmd() *cobra.Command {
	o := &jobCheckpointsOptions{}
	cmd := &cobra.Command{
		Use:     "checkpoints ID",
		Short:   "List a job's checkpoints: step, epoch, files and holders",
		Example: `  meshnode job checkpoints 3f9a1c2e7b4d -o json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			c, err := o.api.client(cmd)
			if err != nil {
				return err
			}
			cks, err := c.Checkpoints(cmd.Context(), args[0])
			if err != nil {
				return jobErr(args[0], err)
			}
			if o.output == "json" {
				if cks == nil {
					cks = []api.CheckpointView{}
				}
				return writeJSON(cmd.OutOrStdout(), cks)
			}
			w := cmd.OutOrStdout()
			if len(cks) == 0 {
				fmt.Fprintln(w, "no checkpoints yet")
			}
			for _, c := range cks {
				state := "incomplete"
				if c.Complete {
					state = "complete"
				}
				if c.Pruned {
					state = "pruned"
				}
				var bytes int64
				hashes := map[string]bool{}
				for _, f := range c.Files {
					if !hashes[f.Hash] {
						hashes[f.Hash] = true
						bytes += f.Bytes
					}
				}
				fmt.Fprintf(w, "step %-6d epoch %-3d %-10s %d files (%s), %d holder entries, %s\n",
					c.Step, c.Epoch, state, len(hashes), humanBytes(bytes), len(c.Files), c.Time.Local().Format("15:04:05"))
			}
			return nil
		},
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return cmd
}
