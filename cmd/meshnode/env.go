package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envName is the environment variable standing in for a flag: --join-secret is
// MESHNODE_JOIN_SECRET.
func envName(flag string) string {
	return "MESHNODE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// withEnv gives every flag of cmd a MESHNODE_* environment variable: the variable's name is
// added to the flag's help once, and before the command runs each flag not given on the command
// line takes the variable's value when it is set. A flag on the command line wins.
func withEnv(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if mark := fmt.Sprintf("[$%s]", envName(f.Name)); !strings.Contains(f.Usage, mark) {
			f.Usage += " " + mark // flags shared by the client commands name it already
		}
	})
	prev := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if err := applyEnv(c.Flags()); err != nil {
			return err
		}
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
	return cmd
}

func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed {
			return
		}
		v, ok := os.LookupEnv(envName(f.Name))
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usagef("$%s: %v", envName(f.Name), serr)
		}
	})
	return err
}
