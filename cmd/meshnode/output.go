package main

import "github.com/spf13/cobra"

// addOutputFlag registers -o/--output: "text" (default, for people) or "json" (one object
// per line, for programs).
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "text", `output format: "text" or "json"`)
}

func checkOutputFormat(output string) error {
	if output != "text" && output != "json" {
		return usagef("--output: must be \"text\" or \"json\" (got %q)", output)
	}
	return nil
}
