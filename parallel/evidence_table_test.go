package parallel

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh/frame"
)

var evidenceTable = flag.Bool("evidence-table", false, "print which colluders the honest workers' evidence convicts (TestEvidenceTable)")

// TestEvidenceTable maps where two colluders of four (one-stage replicas, signing what
// they send, their contributions scaled) leave the plan on a leader's verdict: for each
// sync mode, rule and scaling, whether each honest worker named both colluders and kept
// evidence against each that the leader's check convicts. Two of four is not a majority,
// so without a conviction the colluders stay in the plan (bounded, not excluded). It
// prints the table with -evidence-table; it fails on a conviction of an honest member
// and on a run whose honest workers name nobody where they hold convicting evidence.
func TestEvidenceTable(t *testing.T) {
	if !*evidenceTable {
		t.Skip("the table takes a few minutes: -evidence-table")
	}
	modes := map[string]func(*JobConfig){
		"diloco": func(*JobConfig) {},
		"sync":   func(c *JobConfig) { c.Sync.Mode = jobspec.SyncEveryStep },
		"zero-1": func(c *JobConfig) { c.Sync.Mode, c.Sync.Zero = jobspec.SyncEveryStep, 1 },
		"zero-2": func(c *JobConfig) { c.Sync.Mode, c.Sync.Zero = jobspec.SyncEveryStep, 2 },
		"streaming": func(c *JobConfig) {
			c.Sync.Mode, c.Sync.InnerSteps, c.Sync.Fragments, c.Sync.Overlap = jobspec.SyncStreaming, 4, 2, 1
		},
	}
	names := []string{"diloco", "sync", "zero-1", "zero-2", "streaming"}
	scales := []float32{-15, -1, 15, 0.05, 0.75, 4}
	rules := []jobspec.Aggregate{jobspec.AggregateMean, jobspec.AggregateMedian}
	var rows []string
	header := "| mode | rule |"
	for _, s := range scales {
		header += fmt.Sprintf(" ×%g |", s)
	}
	rows = append(rows, header, "|---|---|"+strings.Repeat("---|", len(scales)))
	for _, name := range names {
		for _, rule := range rules {
			row := fmt.Sprintf("| %s | %s |", name, rule)
			for _, s := range scales {
				set := func(c *JobConfig) { modes[name](c); c.Sync.Aggregate = rule }
				collude := func(p signingPeer) Transport { return wholeResigner{resigner{signingPeer: p, s: s}} }
				run, cfg, plan, ids := colludedRunWith(t, 12, 2, collude, set)
				row += " " + evidenceCell(t, run, cfg, plan, ids) + " |"
				run.Close()
			}
			t.Log(row)
			rows = append(rows, row)
		}
	}
	fmt.Println(strings.Join(rows, "\n"))
}

// wholeResigner is a colluder that scales everything it sends: its signed contributions
// (resigner) and its unsigned reduce frames too (ZeRO's direct reduce-scatter and
// parameter chunks, which a resigner alone leaves honest).
type wholeResigner struct{ resigner }

func (p wholeResigner) Send(ctx context.Context, to string, f *frame.Frame) error {
	n := 0
	if len(f.Shape) == 1 {
		n = f.Shape[0]
	}
	if f.Kind == frame.KindReduce && f.DType == frame.DTypeF32 && n > 1 && len(f.Payload) == maxWireBytes(f.Codec, n) {
		g, err := rewriteReduce(f, func(x float32) float32 { return x * p.s })
		if err != nil {
			return err
		}
		return p.signingPeer.Send(ctx, to, g)
	}
	return p.resigner.Send(ctx, to, f)
}

// evidenceCell is one cell of TestEvidenceTable: per colluder, how many honest workers
// named it / kept evidence / whose evidence convicts, as "n/e/c" for ids[2] then ids[3].
func evidenceCell(t *testing.T, run *LocalRun, cfg JobConfig, plan Plan, ids []string) string {
	t.Helper()
	var cells []string
	for _, bad := range ids[2:] {
		named, kept, convicts := 0, 0, 0
		for h := range 2 {
			if _, n := run.ReportedBy(h); slices.Contains(n, bad) {
				named++
			}
			ev := run.Workers()[h].Evidence(bad)
			if ev == nil {
				continue
			}
			kept++
			wire, err := UnmarshalEvidence(ev.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if ok, _, err := VerifyEvidence(cfg, plan, testData(), wire, bad); err == nil && ok {
				convicts++
			}
		}
		cells = append(cells, fmt.Sprintf("%d/%d/%d", named, kept, convicts))
	}
	for h := range 2 {
		for _, honest := range ids[:2] {
			ev := run.Workers()[1-h].Evidence(honest)
			if ev == nil {
				continue
			}
			wire, err := UnmarshalEvidence(ev.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if ok, why, err := VerifyEvidence(cfg, plan, testData(), wire, honest); err == nil && ok {
				t.Errorf("honest worker's evidence convicts honest %s: %s", honest, why)
			}
		}
	}
	return strings.Join(cells, " ")
}
