package consensus

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Per-operation authorization on the leader. The caller is the authenticated peer of the
// RPC stream (or this node itself for a local call):
//   - only the leader itself plans and moves a job to planning or running;
//   - only a node of the job's current plan (or the leader) reports the job's progress,
//     checkpoints, events, and its end (done, failed); a checkpoint names as holders only
//     nodes of that plan (a writer pushes its file to a plan neighbour and reports both);
//   - any member may submit and cancel: users do that through any node's local API;
//   - nothing is reported for a finished job.

// authorizeReporter allows from to report on job jobID.
func (c *Consensus) authorizeReporter(from peer.ID, jobID string) error {
	j, _, err := c.fsm.Job(jobID)
	if err != nil {
		return err
	}
	if j.Status.Terminal() {
		return fmt.Errorf("job %s is %s: %w", jobID, j.Status, ErrJobFinished)
	}
	if from == c.host.ID() {
		return nil
	}
	p := j.CurrentPlan()
	if p == nil || !slices.Contains(planNodes(p.Plan), from.String()) {
		return fmt.Errorf("%w: %s is not a node of job %s's current plan", ErrForbidden, from, jobID)
	}
	return nil
}

// authorizeHolders allows a checkpoint report whose files are all held by nodes of the
// job's current plan.
func (c *Consensus) authorizeHolders(from peer.ID, args CheckpointRequest) error {
	if from == c.host.ID() {
		return nil
	}
	j, _, err := c.fsm.Job(args.JobID)
	if err != nil {
		return err
	}
	var nodes []string
	if p := j.CurrentPlan(); p != nil {
		nodes = planNodes(p.Plan)
	}
	for _, f := range args.Manifest.Files {
		if !slices.Contains(nodes, f.Node) {
			return fmt.Errorf("%w: %s reports a checkpoint file held by %s, which is not in job %s's plan", ErrForbidden, from, f.Node, args.JobID)
		}
	}
	return nil
}

// authorizeStatus allows from to move a job to args.Status.
func (c *Consensus) authorizeStatus(from peer.ID, args StatusArgs) error {
	if from == c.host.ID() {
		return nil
	}
	switch args.Status {
	case JobCancelled:
		return nil
	case JobDone, JobFailed:
		return c.authorizeReporter(from, args.ID)
	}
	return fmt.Errorf("%w: only the leader moves a job to %s; %s asked for job %s", ErrForbidden, args.Status, from, args.ID)
}

// planNodes lists the node IDs a plan names. A plan is opaque to this package except for
// this one contract: its nodes appear as replicas[r][s].node (the engine's plan) or
// replicas[r].stages[s].node (the balancer's).
func planNodes(plan json.RawMessage) []string {
	var p struct {
		Replicas []json.RawMessage `json:"replicas"`
	}
	if json.Unmarshal(plan, &p) != nil {
		return nil
	}
	type stage struct {
		Node string `json:"node"`
	}
	var out []string
	for _, r := range p.Replicas {
		var flat []stage
		if json.Unmarshal(r, &flat) != nil {
			var nested struct {
				Stages []stage `json:"stages"`
			}
			if json.Unmarshal(r, &nested) != nil {
				continue
			}
			flat = nested.Stages
		}
		for _, s := range flat {
			out = append(out, s.Node)
		}
	}
	return out
}

// truncate cuts s to at most max bytes on a rune boundary.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[:max]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
