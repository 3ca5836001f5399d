package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/scheduler"
)

// The blob service's policies (issue 25). Blobs move between members for two reasons: a
// live job's dataset (any member may train on it or hold a replica of it) and a job's
// checkpoint files (between the nodes of the job's plan). Nothing else is served, and a
// pull a peer asks for is bounded by what a checkpoint file of a job both nodes run can be.

// checkpointSlack is added to a job's training state to bound one of its checkpoint files:
// the safetensors header and metadata.
const checkpointSlack = 1 << 20

// policyJobsTimeout bounds the read of the jobs behind one policy decision.
const policyJobsTimeout = 5 * time.Second

// errNoSharedJob refuses a blob no job makes this node hold or serve.
var errNoSharedJob = errors.New("no running job holds both nodes")

// policyJobs reads the jobs the control plane holds, for a policy decision.
func (n *Node) policyJobs() ([]consensus.Job, error) {
	c := n.Consensus()
	if c == nil || n.engine == nil {
		return nil, errNoConsensus
	}
	ctx, cancel := context.WithTimeout(context.Background(), policyJobsTimeout)
	defer cancel()
	jobs, _, err := c.Jobs(ctx, false)
	if err != nil {
		return nil, fmt.Errorf("read jobs: %w", err)
	}
	return jobs, nil
}

// acceptReplica is the blob service's policy for peers asking this node to hold a blob:
// the dataset of a live job (replicated at submit, so that the job outlives its
// submitter), or a checkpoint file of a running job both nodes are planned on, at most the
// job's training state in size (its manifest is committed only once this node holds it, so
// the file itself cannot be checked yet).
func (n *Node) acceptReplica(from peer.ID, hash string) (int64, error) {
	jobs, err := n.policyJobs()
	if err != nil {
		return 0, err
	}
	if n.data.partOfLiveDataset(jobs, hash) {
		return 0, nil // a shard of a live job's sharded dataset: as the dataset itself
	}
	limit, err := pullPolicy(jobs, n.ID().String(), from.String(), hash)
	if err == nil && limit > 0 {
		n.engine.runner.Pin(hash) // its manifest is committed only once this node holds it
	}
	return limit, err
}

// allowServe is the blob service's policy for peers fetching from this node: a live job's
// dataset (or a shard of it) to any member, a checkpoint file to a node the job's current
// plan names, an evidence blob this node announced to the leader.
func (n *Node) allowServe(to peer.ID, hash string) error {
	if ok, err := n.serveEvidence(to, hash); ok {
		return err // an evidence blob this node announced: to the leader only
	}
	jobs, err := n.policyJobs()
	if err != nil {
		return err
	}
	if n.data.partOfLiveDataset(jobs, hash) {
		return nil // a shard of a live job's sharded dataset: as the dataset itself
	}
	return servePolicy(jobs, to.String(), hash)
}

// pullPolicy decides a pull of hash that from asks self to make: a live job's dataset
// (any size: 0), or, from a node sharing a running job's plan with self, a blob of at
// most the largest training state of those jobs.
func pullPolicy(jobs []consensus.Job, self, from, hash string) (int64, error) {
	if datasetOfLiveJob(jobs, hash) {
		return 0, nil
	}
	var limit int64
	for _, j := range jobs {
		if nodes := planNodes(j); j.Status == consensus.JobRunning && slices.Contains(nodes, self) && slices.Contains(nodes, from) {
			limit = max(limit, checkpointFileBound(j))
		}
	}
	if limit == 0 {
		return 0, errNoSharedJob
	}
	return limit, nil
}

// servePolicy decides whether hash is served to node to: the dataset of a live job, or a
// file of one of a job's checkpoints when the job's current plan names to (it restores
// the job from it or keeps a copy).
func servePolicy(jobs []consensus.Job, to, hash string) error {
	if datasetOfLiveJob(jobs, hash) {
		return nil
	}
	for _, j := range jobs {
		if checkpointHolds(j, hash) && slices.Contains(planNodes(j), to) {
			return nil
		}
	}
	return errors.New("neither a live job's dataset nor a checkpoint file of a job planned on the asking node")
}

// planNodes are the nodes of j's current plan, none when it has none or it is unreadable.
func planNodes(j consensus.Job) []string {
	cur := j.CurrentPlan()
	if cur == nil {
		return nil
	}
	var jp scheduler.JobPlan
	if json.Unmarshal(cur.Plan, &jp) != nil {
		return nil
	}
	return jp.Nodes()
}

// checkpointHolds reports whether hash is a file of one of j's checkpoints.
func checkpointHolds(j consensus.Job, hash string) bool {
	for _, m := range j.Checkpoints {
		for _, f := range m.Files {
			if f.Hash == hash {
				return true
			}
		}
	}
	return false
}

// checkpointFileBound is the most bytes one checkpoint file of j can have: its model's whole
// training state (a file holds one stage's weights and optimizer moments) and a header.
func checkpointFileBound(j consensus.Job) int64 {
	var n int64
	for _, c := range scheduler.ModelConfig(j.Spec).LayerCosts() {
		n += c.StaticBytes()
	}
	return n + checkpointSlack
}
