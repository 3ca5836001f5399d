package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"
)

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

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	w.Write(append(b, '\n'))
}

func ptr[T any](v T) *T { return &v }

func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }
func round1(x float64) float64 { return math.Round(x*10) / 10 }

// humanBytes renders a byte count for people: 512 B, 3.2 MiB, 1.5 GiB.
func humanBytes[N int64 | uint64](n N) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := N(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
