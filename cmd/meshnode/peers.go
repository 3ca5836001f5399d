package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
)

func newPeersCmd() *cobra.Command {
	return newViewCmd("peers", "List the mesh's other nodes: state, last heartbeat, data-plane address reached, link RTT and bandwidth, profile",
		(*api.Client).Peers, printPeers)
}

func printPeers(w io.Writer, peers []api.Peer) {
	if len(peers) == 0 {
		fmt.Fprintln(w, "no peers yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tLAST SEEN\tDATA ADDR\tPATH\tPATH BYTES\tRTT\tBANDWIDTH\tGFLOP/S\tPROVED\tMEM BUDGET\tGPUS")
	for _, p := range peers {
		rtt, bw, gflops, budget, gpus, data, path := "-", "-", "-", "-", "-", "-", "-"
		if p.Path != "" {
			path = p.Path
		}
		if p.DataAddr != "" {
			data = p.DataAddr
		}
		if p.RTTMs != nil {
			rtt = fmt.Sprintf("%.2f ms", *p.RTTMs)
		}
		if p.BandwidthMbps != nil {
			bw = fmt.Sprintf("%.0f Mbit/s", *p.BandwidthMbps)
		}
		if pr := p.Profile; pr != nil {
			gflops = fmt.Sprintf("%.1f", pr.GemmGFLOPS)
			budget = humanBytes(pr.MemoryBudgetBytes)
			gpus = fmt.Sprint(len(pr.GPUs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.State,
			time.Since(p.LastSeen).Round(100*time.Millisecond), data, path, pathBytes(p.PathBytes), rtt, bw, gflops, proved(p), budget, gpus)
	}
	tw.Flush()
}

// proved is the speed the peer proved to the leader (docs/mesh.md, "Speed proofs"): "-"
// before any proof, "lie" after a wrong answer.
func proved(p api.Peer) string {
	switch {
	case p.SpeedLie:
		return "lie"
	case p.ProvedGFLOPS == nil:
		return "-"
	}
	return fmt.Sprintf("%.1f", *p.ProvedGFLOPS)
}

// pathBytes lists the bytes each kind of path carried, "relayed 12.0 MiB, direct 1.0 KiB",
// by kind name; "-" when none.
func pathBytes(m map[string]int64) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+" "+humanBytes(uint64(m[k])))
	}
	return strings.Join(parts, ", ")
}
