package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/node"
)

type peersOptions struct {
	api    string
	output string
}

func newPeersCmd() *cobra.Command {
	o := peersOptions{}
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "List the mesh's other nodes: state, last heartbeat, link RTT and bandwidth, profile",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutputFormat(o.output); err != nil {
				return err
			}
			var peers []node.PeerView
			raw, err := getNodeAPI(cmd.Context(), o.api, "/v1/peers", &peers)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeCompactJSON(cmd.OutOrStdout(), raw)
			}
			printPeers(cmd.OutOrStdout(), peers)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.api, "api", node.DefaultAPIAddr, "address of the local node's HTTP API")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func printPeers(w io.Writer, peers []node.PeerView) {
	if len(peers) == 0 {
		fmt.Fprintln(w, "no peers yet")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tLAST SEEN\tRTT\tBANDWIDTH\tGFLOP/S\tMEM BUDGET\tGPUS")
	for _, p := range peers {
		rtt, bw, gflops, budget, gpus := "-", "-", "-", "-", "-"
		if p.RTTMs != nil {
			rtt = fmt.Sprintf("%.2f ms", *p.RTTMs)
		}
		if p.BandwidthMbps != nil {
			bw = fmt.Sprintf("%.0f Mbit/s", *p.BandwidthMbps)
		}
		if pr := p.Profile; pr != nil {
			gflops = fmt.Sprintf("%.1f", pr.GemmGFLOPS)
			budget = meshBytes(pr.MemoryBudgetBytes)
			gpus = fmt.Sprint(len(pr.GPUs))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s ago\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.State,
			time.Since(p.LastSeen).Round(100*time.Millisecond), rtt, bw, gflops, budget, gpus)
	}
	tw.Flush()
}
