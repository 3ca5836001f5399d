package main

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

// viewOptions are the flags of a command that shows one view of the local node.
type viewOptions struct {
	api    apiOptions
	output string
}

// newViewCmd is a command that reads one view from the local node's API (get) and writes
// it as JSON with -o json, else as text (print): `meshnode status`, `meshnode peers`.
func newViewCmd[T any](use, short string, get func(*api.Client, context.Context) (T, error), print func(io.Writer, T)) *cobra.Command {
	o := viewOptions{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			c, err := o.api.client(cmd)
			if err != nil {
				return err
			}
			v, err := get(c, cmd.Context())
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			print(cmd.OutOrStdout(), v)
			return nil
		},
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}
