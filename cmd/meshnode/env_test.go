package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestHelpNamesEachEnvVarOnce walks every command: a flag's help names its MESHNODE_*
// variable exactly once (the client commands' shared flags named it already, and withEnv
// appended it again).
func TestHelpNamesEachEnvVarOnce(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			mark := "[$" + envName(f.Name) + "]"
			if n := strings.Count(f.Usage, mark); n > 1 {
				t.Errorf("%s --%s: help names %s %d times: %q", c.CommandPath(), f.Name, mark, n, f.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}
