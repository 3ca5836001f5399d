package node

import (
	"encoding/json"
	"testing"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/scheduler"
)

// policyJob is a job planned on nodes, with a dataset blob and one checkpoint file.
func policyJob(t *testing.T, id string, status jobspec.JobStatus, dataset, file string, nodes ...string) consensus.Job {
	t.Helper()
	var jp scheduler.JobPlan
	for _, n := range nodes {
		jp.Replicas = append(jp.Replicas, []scheduler.Stage{{Node: n}})
	}
	raw, err := json.Marshal(jp)
	if err != nil {
		t.Fatal(err)
	}
	j := consensus.Job{ID: id, Status: status, Spec: jobspec.DefaultSpec()}
	j.Spec.Data.Blob = dataset
	j.Plans = []consensus.PlanEpoch{{Epoch: 1, Plan: raw}}
	j.Checkpoints = []consensus.CheckpointManifest{{Epoch: 1, Step: 10, Files: []consensus.CheckpointFile{{Hash: file, Node: nodes[0]}}}}
	return j
}

// Issue 25: a plan neighbour could make a node fetch, or serve it, any blob. A node now
// serves a checkpoint file only to a node its job's plan names, a dataset only while its
// job lives, nothing else; and it pulls for a neighbour only blobs no larger than a
// checkpoint file of a running job they share.
func TestBlobPoliciesFollowTheJobs(t *testing.T) {
	jobs := []consensus.Job{
		policyJob(t, "run", jobspec.JobRunning, "data-run", "ckpt-run", "a", "b"),
		policyJob(t, "done", jobspec.JobDone, "data-done", "ckpt-done", "a", "c"),
	}
	for _, c := range []struct {
		to, hash string
		ok       bool
	}{
		{"b", "ckpt-run", true},   // a plan member restores or copies the file
		{"c", "ckpt-run", false},  // a member outside the job's plan
		{"c", "data-run", true},   // a live job's dataset, to any member
		{"c", "data-done", false}, // a finished job's dataset
		{"c", "ckpt-done", true},  // its checkpoint, to its own plan's node (export, restore)
		{"b", "ckpt-done", false},
		{"b", "anything", false}, // a blob no job names
	} {
		if err := servePolicy(jobs, c.to, c.hash); (err == nil) != c.ok {
			t.Errorf("serve %s to %s: %v, want allowed %v", c.hash, c.to, err, c.ok)
		}
	}
	bound := checkpointFileBound(jobs[0])
	for _, c := range []struct {
		self, from, hash string
		limit            int64
		ok               bool
	}{
		{"b", "a", "new-ckpt", bound, true}, // a neighbour's checkpoint file, bounded
		{"b", "c", "new-ckpt", 0, false},    // no running job holds both
		{"c", "a", "new-ckpt", 0, false},    // only a finished one does
		{"c", "x", "data-run", 0, true},     // a live job's dataset, from anyone, any size
	} {
		limit, err := pullPolicy(jobs, c.self, c.from, c.hash)
		if (err == nil) != c.ok || limit != c.limit {
			t.Errorf("%s pulls %s from %s: limit %d, %v; want %d, allowed %v", c.self, c.hash, c.from, limit, err, c.limit, c.ok)
		}
	}
	if bound <= checkpointSlack || bound > 1<<40 {
		t.Errorf("checkpoint file bound %d for the default model", bound)
	}
}
