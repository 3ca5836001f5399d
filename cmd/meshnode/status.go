package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/node"
)

type statusOptions struct {
	api    string
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
			var st node.StatusView
			raw, err := getNodeAPI(cmd.Context(), o.api, "/v1/status", &st)
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeCompactJSON(cmd.OutOrStdout(), raw)
			}
			printStatus(cmd.OutOrStdout(), st)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.api, "api", node.DefaultAPIAddr, "address of the local node's HTTP API")
	addOutputFlag(cmd, &o.output)
	return withEnv(cmd)
}

func printStatus(w io.Writer, st node.StatusView) {
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
			p.Cores, meshBytes(p.MemoryBudgetBytes), meshBytes(p.MemoryAvailableBytes), meshBytes(p.DiskFreeBytes), p.OS, p.Arch)
		for _, g := range p.GPUs {
			fmt.Fprintf(w, "  GPU %d: %s, %s, %d SMs, %d MHz\n", g.Index, g.Name, meshBytes(g.MemoryTotalBytes), g.Multiprocessors, g.SMClockMHz)
		}
	}
}

// getNodeAPI fetches path from the node's API into v and returns the raw body too.
func getNodeAPI(ctx context.Context, api, path string, v any) ([]byte, error) {
	base := strings.TrimRight(api, "/")
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, usagef("--api %q: %v", api, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the node's API at %s (is `meshnode join` running? set --api or MESHNODE_API): %w", base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s%s: %w", base, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s%s: %s: %s", base, path, resp.Status, strings.TrimSpace(string(raw)))
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("%s%s: %w", base, path, err)
	}
	return raw, nil
}

// writeCompactJSON writes a JSON document on one line.
func writeCompactJSON(w io.Writer, raw []byte) error {
	var buf strings.Builder
	var v json.RawMessage = raw
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf.Write(b)
	buf.WriteByte('\n')
	_, err = io.WriteString(w, buf.String())
	return err
}

func meshBytes(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
