package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/testnet"
)

func newTestnetDownCmd() *cobra.Command {
	var dir, output string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop a testnet: no process of it is left behind",
		Long: `Stop the testnet in --dir: the supervisor stops the nodes (SIGTERM, then SIGKILL after 10s)
and exits; then every PID of DIR/testnet.json still running is killed, and the command
waits until none is. The directory (data, logs) is kept.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(output); err != nil {
				return err
			}
			pids, err := testnet.Down(cmd.Context(), dir, timeout)
			if err != nil {
				return err
			}
			if output == "json" {
				writeJSONLine(cmd.OutOrStdout(), map[string]any{"dir": dir, "stopped_pids": append([]int{}, pids...)})
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "testnet in %s is down (%d processes stopped)\n", dir, len(pids))
			return nil
		},
	}
	addDirFlag(cmd, &dir)
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long the supervisor has to stop the nodes")
	addOutputFlag(cmd, &output)
	return withEnv(cmd)
}
