package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/consensus"
)

type jobsOptions struct {
	api        apiOptions
	consistent bool
	output     string
}

func newJobsCmd() *cobra.Command {
	o := &jobsOptions{}
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List the mesh's jobs",
		Long: `List every job the mesh knows, oldest first. The local node answers from its copy of
the replicated state, which may lag the leader by a moment; --consistent asks the leader.`,
		Example: `  meshnode jobs
  meshnode jobs -o json   # [{"id":..,"name":..,"status":..,"submitted_at":..}]`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	addAPIFlags(cmd, &o.api)
	cmd.Flags().BoolVar(&o.consistent, "consistent", false, "read through the Raft leader")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *jobsOptions) run(cmd *cobra.Command) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	jobs, err := c.Jobs(cmd.Context(), o.consistent)
	if err != nil {
		return fmt.Errorf("list jobs: %w", err)
	}
	w := cmd.OutOrStdout()
	if o.output == "json" {
		if jobs == nil {
			jobs = []consensus.JobSummary{}
		}
		return writeJSON(w, jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no jobs (submit one with `meshnode submit job.yaml`)")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tSUBMITTED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.ID, j.Name, j.Status, ago(j.SubmittedAt))
	}
	return tw.Flush()
}

// ago renders a past time for people: "42s ago", "3m ago", or a date when old.
func ago(t time.Time) string {
	d := time.Since(t).Round(time.Second)
	switch {
	case t.IsZero():
		return "-"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02 15:04")
}
