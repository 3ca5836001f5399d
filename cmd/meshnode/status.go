package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

func newStatusCmd() *cobra.Command {
	return newViewCmd("status", "Show this node: ID, addresses, measured profile, mesh size", (*api.Client).Status, printStatus)
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
