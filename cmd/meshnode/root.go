package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// newRootCmd builds the command tree. Every subcommand lives in its own file.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "meshnode",
		Short: "A federated, geo-distributed training mesh in one binary",
		Long: `meshnode trains one model across scattered, unequal machines: peers meet on a libp2p
mesh, a Raft group holds job state, a balancer sizes pipeline stages to each node's measured
speed and memory, and every node runs a real training engine.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCmd(),
		newExportCmd(),
		newLoRAExportCmd(),
		newInitCmd(),
		newJoinCmd(),
		newPeersCmd(),
		newStatusCmd(),
		newIDCmd(),
		newPlanCmd(),
		newBenchCmd(),
		newTrainCmd(),
		newGenerateCmd(),
		newSubmitCmd(),
		newJobsCmd(),
		newJobCmd(),
		newRaftCmd(),
		newTestnetCmd(),
		newTokenizerCmd(),
	)
	// Flag parsing errors are usage errors: exit code 2 with the flag named.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{err: fmt.Errorf("%s: %w", c.CommandPath(), err)}
	})
	return root
}

// usageError marks bad input from the user: a bad flag, a missing or unreadable file, a
// value out of range. It exits with code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef builds a usageError.
func usagef(format string, args ...any) error {
	return usageError{err: fmt.Errorf(format, args...)}
}

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

// printError writes err as one line: meshnode errors are meant to be read by people.
func printError(w io.Writer, err error) {
	msg := strings.ReplaceAll(err.Error(), "\n", "; ")
	fmt.Fprintf(w, "meshnode: %s\n", msg)
}
