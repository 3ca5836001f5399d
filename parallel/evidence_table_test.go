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

var (
	evidenceTable  = flag.Bool("evidence-table", false, "print which colluders the honest workers' evidence convicts (TestEvidenceTable)")
	evidenceStages = flag.Int("evidence-stages", 1, "the pipeline stages per replica TestEvidenceTable runs (1 or 2)")
)

// TestEvidenceTable maps where two colluders of four (one-stage replicas, or with
// -evidence-stages 2 two-stage ones whose stage-0 nodes collude; signing what they send,
// everything they send scaled) leave the plan on a leader's verdict: for each
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
	rules := []jobspec.Aggregate{jobspec.AggregateMean, jobspec.AggregateMedian, jobspec.AggregateTrimmed, jobspec.AggregateCenteredClip}
	if *evidenceStages == 2 {
		delete(modes, "streaming") // streaming across stages keeps no evidence (docs/security.md)
		names = slices.DeleteFunc(names, func(n string) bool { return n == "streaming" })
	}
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
				collude := func(p signingPeer, _ []string) Transport { return wholeResigner{resigner{signingPeer: p, s: s}} }
				var cell string
				if *evidenceStages == 2 {
					run, cfg, plan, _, ids := pipelinedRunWith(t, 12, collude, set)
					cell = evidenceCell(t, run, cfg, plan, [][2]int{{0, 0}, {1, 2}}, []string{ids[0], ids[2]}, []string{ids[4], ids[6]})
					run.Close()
				} else {
					run, cfg, plan, ids := colludedRunWith(t, 12, 2, collude, set)
					cell = evidenceCell(t, run, cfg, plan, [][2]int{{0, 0}, {1, 1}}, ids[:2], ids[2:])
					run.Close()
				}
				row += " " + cell + " |"
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
	return alteringSend(ctx, p.signingPeer, to, f, p.AlterContribution)
}

func (p wholeResigner) AlterContribution(ctx context.Context, to string, f *frame.Frame) (*frame.Frame, error) {
	n := 0
	if len(f.Shape) == 1 {
		n = f.Shape[0]
	}
	if f.Kind == frame.KindReduce && f.DType == frame.DTypeF32 && n > 1 && len(f.Payload) == maxWireBytes(f.Codec, n) {
		return rewriteReduce(f, func(x float32) float32 { return x * p.s })
	}
	return p.resigner.AlterContribution(ctx, to, f)
}

// evidenceCell is one cell of TestEvidenceTable: per colluder (bad), how many honest
// workers (honest: each one's replica and its index among the run's workers; their IDs
// honestIDs) named it / kept evidence /
// whose evidence convicts, as "n/e/c" for each colluder in turn; it fails when an honest
// worker's evidence convicts the other honest one.
func evidenceCell(t *testing.T, run *LocalRun, cfg JobConfig, plan Plan, honest [][2]int, honestIDs, bad []string) string {
	t.Helper()
	convicts := func(ev *Evidence, accused string) bool {
		wire, err := UnmarshalEvidence(ev.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		ok, _, err := VerifyEvidence(cfg, plan, testData(), wire, accused)
		return err == nil && ok
	}
	var cells []string
	for _, b := range bad {
		named, kept, convicted := 0, 0, 0
		for _, h := range honest {
			if _, n := run.ReportedBy(h[0]); slices.Contains(n, b) {
				named++
			}
			if ev := run.Workers()[h[1]].Evidence(b); ev != nil {
				kept++
				if convicts(ev, b) {
					convicted++
				}
			}
		}
		cells = append(cells, fmt.Sprintf("%d/%d/%d", named, kept, convicted))
	}
	for k, h := range honest {
		other := honestIDs[1-k]
		if ev := run.Workers()[h[1]].Evidence(other); ev != nil && convicts(ev, other) {
			t.Errorf("honest worker %d's evidence convicts honest %s", h, other)
		}
	}
	return strings.Join(cells, " ")
}
