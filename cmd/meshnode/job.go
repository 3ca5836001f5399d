package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

func newJobCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Inspect or cancel one job",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("job: name a subcommand: status, checkpoints or cancel")
		},
	}
	cmd.AddCommand(newJobStatusCmd(), newJobCheckpointsCmd(), newJobCancelCmd())
	return cmd
}

type jobStatusOptions struct {
	api        apiOptions
	consistent bool
	events     int
	output     string
	follow     bool
}

func newJobStatusCmd() *cobra.Command {
	o := &jobStatusOptions{}
	cmd := &cobra.Command{
		Use:   "status ID",
		Short: "Show a job's status, plan, progress and events",
		Example: `  meshnode job status 3f9a1c2e7b4d
  meshnode job status 3f9a1c2e7b4d -o json   # {"id":..,"status":..,"spec":{..},"plan":..,"progress":{..},"events":[..]}
  meshnode job status 3f9a1c2e7b4d --follow  # live progress until the job ends; exits 1 unless it is done`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	addAPIFlags(cmd, &o.api)
	cmd.Flags().BoolVar(&o.consistent, "consistent", false, "read through the Raft leader")
	cmd.Flags().IntVar(&o.events, "events", 10, "how many of the latest events to print (text output)")
	cmd.Flags().BoolVarP(&o.follow, "follow", "f", false, "follow the job until it ends: events and progress as they come (a progress bar on a terminal; JSON lines with -o json), then its status; exit 1 unless it ends done")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *jobStatusOptions) run(cmd *cobra.Command, id string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	if o.follow {
		return o.runFollow(cmd, c, id)
	}
	d, err := c.Job(cmd.Context(), id, o.consistent)
	if err != nil {
		return jobErr(id, err)
	}
	if o.output == "json" {
		return writeJSON(cmd.OutOrStdout(), d)
	}
	printJobDetail(cmd.OutOrStdout(), d, o.events)
	return nil
}

// runFollow follows the job to its end, then prints its detail (the last JSON line with
// -o json) and fails unless it ended done.
func (o *jobStatusOptions) runFollow(cmd *cobra.Command, c *api.Client, id string) error {
	w := cmd.OutOrStdout()
	d, err := followJob(cmd.Context(), c, id, newTestnetReporter(w, cmd.ErrOrStderr(), o.output == "json"))
	if err != nil {
		return err
	}
	if o.output == "json" {
		err = writeJSON(w, d)
	} else {
		fmt.Fprintln(w)
		printJobDetail(w, d, o.events)
	}
	return errors.Join(err, jobEndErr(d))
}

func printJobDetail(w io.Writer, d consensus.JobDetail, events int) {
	fmt.Fprintf(w, "job        %s\nname       %s\nstatus     %s\nsubmitted  %s (%s)\n",
		d.ID, d.Name, d.Status, d.SubmittedAt.Local().Format("2006-01-02 15:04:05"), ago(d.SubmittedAt))
	m, p := d.Spec.Model, d.Spec.Parallel
	fmt.Fprintf(w, "model      %d layers, d_model %d, %d heads, context %d, vocab %d\n", m.Layers, m.DModel, m.Heads, m.Context, m.Vocab)
	fmt.Fprintf(w, "parallel   replicas %s, stages %s, %s, %s every %d, codec %s\n", p.Replicas, p.Stages, p.Schedule, p.Sync, p.InnerSteps, p.Codec)
	if d.Plan == nil {
		fmt.Fprintln(w, "plan       none yet")
	} else {
		restarts, rebalances := 0, 0
		for _, e := range d.Events {
			switch e.Kind {
			case consensus.EventReplan:
				restarts++
			case consensus.EventRebalance:
				rebalances++
			}
		}
		redone := 0
		for _, n := range scheduler.StepsRedone(scheduler.EventsFromRecord(d.Events)) {
			redone += n
		}
		fmt.Fprintf(w, "plan       epoch %d (%s); %d restart(s) after failures, %d rebalance(s), %d step(s) redone\n",
			d.Plan.Epoch, ago(d.Plan.SetAt), restarts, rebalances, redone)
		printLayerMap(w, d.Plan.Plan)
	}
	if pr := d.Progress; pr.UpdatedAt != nil {
		fmt.Fprintf(w, "progress   step %d/%d, loss %.4f, %.0f tok/s, %.2f s/step, %s sent\n", pr.Step, pr.Steps, pr.Loss, pr.TokensPerSec, pr.StepSeconds, humanBytes(int64(pr.BytesSent)))
		if pr.InitialValLoss != nil && pr.ValLoss != nil {
			fmt.Fprintf(w, "val loss   %.4f at start, %.4f now\n", *pr.InitialValLoss, *pr.ValLoss)
		}
	} else {
		fmt.Fprintf(w, "progress   none reported (0/%d steps)\n", d.Progress.Steps)
	}
	printLocalData(w, d)
	start := max(0, len(d.Events)-events)
	if len(d.Events) > 0 && events > 0 {
		fmt.Fprintln(w, "events")
	}
	for _, e := range d.Events[start:] {
		fmt.Fprintf(w, "  %s  %-10s %s\n", e.Time.Local().Format("15:04:05"), e.Kind, e.Message)
	}
}

// printLocalData shows, for a data.local job, which node trained on which local dataset
// and how its validation loss on its own split went (its local_eval events).
func printLocalData(w io.Writer, d consensus.JobDetail) {
	if d.Spec.Data.Local == "" {
		return
	}
	fmt.Fprintf(w, "data       local dataset %q on each node\n", d.Spec.Data.Local)
	type evals struct{ first, last consensus.Event }
	by := map[string]*evals{}
	var order []string
	for _, e := range d.Events {
		if e.Kind != consensus.EventLocalEval || e.By == "" {
			continue
		}
		if by[e.By] == nil {
			by[e.By] = &evals{first: e}
			order = append(order, e.By)
		}
		by[e.By].last = e
	}
	for _, node := range order {
		_, first, ok1 := jobspec.LocalEvalOf(by[node].first.Message)
		_, last, ok2 := jobspec.LocalEvalOf(by[node].last.Message)
		if ok1 && ok2 {
			fmt.Fprintf(w, "  %s  val loss %.4f at step %d, %.4f at step %d; %s\n", node, first, by[node].first.Step, last, by[node].last.Step, by[node].last.Message)
		}
	}
}

type jobCancelOptions struct {
	api    apiOptions
	output string
}

func newJobCancelCmd() *cobra.Command {
	o := &jobCancelOptions{}
	cmd := &cobra.Command{
		Use:     "cancel ID",
		Short:   "Cancel a job",
		Example: `  meshnode job cancel 3f9a1c2e7b4d`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return o.run(cmd, args[0]) },
	}
	addAPIFlags(cmd, &o.api)
	addOutputFlag(cmd, &o.output)
	return cmd
}

func (o *jobCancelOptions) run(cmd *cobra.Command, id string) error {
	if err := checkOutputFormat(o.output); err != nil {
		return err
	}
	c, err := o.api.client(cmd)
	if err != nil {
		return err
	}
	res, err := c.Cancel(cmd.Context(), id)
	if err != nil {
		if api.StatusCode(err) == http.StatusConflict {
			return fmt.Errorf("cancel job %s: %w", id, err)
		}
		return jobErr(id, err)
	}
	if o.output == "json" {
		return writeJSON(cmd.OutOrStdout(), res)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "cancelled job %s\n", id)
	return nil
}

// printLayerMap prints which node holds which layers under a committed plan.
func printLayerMap(w io.Writer, raw json.RawMessage) {
	var jp scheduler.JobPlan
	if err := json.Unmarshal(raw, &jp); err != nil || len(jp.Replicas) == 0 {
		return
	}
	fmt.Fprintf(w, "           %s: %s\n", jp.Strategy, jp.Reason)
	for r, stages := range jp.Replicas {
		batch := ""
		if r < len(jp.Batches) {
			batch = fmt.Sprintf(", batch %d", jp.Batches[r])
		}
		if r < len(jp.DataShards) {
			batch += fmt.Sprintf(", training shards %v", jp.DataShards[r])
		}
		fmt.Fprintf(w, "  replica %d%s\n", r, batch)
		for _, s := range stages {
			fmt.Fprintf(w, "    layers %3d–%-3d %s\n", s.First, s.Last-1, s.Node)
		}
	}
}
