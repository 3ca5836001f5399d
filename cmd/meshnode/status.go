package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

type statusOptions struct {
	api    apiOptions
	output string
}

func newStatusCmd() *cobra.Command {
	o := statusOptions{}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this node: ID, addresses, measured profile, mesh size",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			c, err := o.api.client(cmd)
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func printStatus(w io.Writer, st api.Status) {
	fmt.Fprintf(w, "id:       %s\nmesh:     %s\npeers:    %d alive or suspect\n", st.ID, st.Mesh, st.Peers)
	if !st.StartedAt.IsZero() {
		fmt.Fprintf(w, "up:       %s\n", time.Since(st.StartedAt).Round(time.Second))
	}
	fmt.Fprintln(w, "addresses:")
	for _, a := range st.Addrs {
		fmt.Fprintf(w, "  %s\n", a)
	}
	if p := st.Profile; p != nil {
		fmt.Fprintf(w, "profile:  GEMM %.1f GFLOP/s (%s), training %.1f GFLOP/s", p.GemmGFLOPS, p.GemmShape, p.TrainGFLOPS)
		if p.Slowdown > 1 {
			fmt.Fprintf(w, " (slowdown %.2g)", p.Slowdown)
		}
		fmt.Fprintf(w, ", %d cores, memory budget %s of %s available, disk free %s, %s/%s\n",
			p.Cores, humanBytes(p.MemoryBudgetBytes), humanBytes(p.MemoryAvailableBytes), humanBytes(p.DiskFreeBytes), p.OS, p.Arch)
		for _, g := range p.GPUs {
			fmt.Fprintf(w, "  GPU %d: %s, %s, %d SMs, %d MHz\n", g.Index, g.Name, humanBytes(g.MemoryTotalBytes), g.Multiprocessors, g.SMClockMHz)
		}
	}
}
