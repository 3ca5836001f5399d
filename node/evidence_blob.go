package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh/blob"
	"github.com/meshnode/meshnode/scheduler"
)

// Offender evidence larger than an RPC message (consensus.MaxEvidenceBytes) travels as a
// blob (docs/security.md, "Verifiable offender evidence"): the reporter publishes it,
// announces its hash and size in the evidence RPC and serves it, to the Raft leader only,
// for evidenceOfferTTL once the leader took it up (then deletes it); the leader fetches it
// in the background from the reporter alone, bounded by the job's model before any chunk
// moves, verifies it against its hash, reads it and deletes it before judging. Nothing else becomes fetchable this way: a reporter serves
// only the evidence blobs it announced itself, and a leader fetches only an announced
// blob it did not already hold.

// evidenceOfferTTL is how long a reporter serves an evidence blob the leader took up: past
// the leader's whole fetch and judgement (consensus.EvidenceBlobTimeout).
var evidenceOfferTTL = consensus.EvidenceBlobTimeout + time.Minute

// evidenceOffers are the evidence blobs this node announced and is serving to the leader.
type evidenceOffers struct {
	mu  sync.Mutex
	ids map[string]int
}

// add offers id until the returned func withdraws it.
func (o *evidenceOffers) add(id string) func() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ids == nil {
		o.ids = map[string]int{}
	}
	o.ids[id]++
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.ids[id]--; o.ids[id] <= 0 {
			delete(o.ids, id)
		}
	}
}

// has reports whether id is an evidence blob this node announced and still offers.
func (o *evidenceOffers) has(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ids[id] > 0
}

// shipEvidence sends a worker's evidence to the leader: inside the RPC when it fits, else
// as a blob this node serves to the leader for evidenceOfferTTL once the leader took it
// up (at once when it did not), then deletes.
func (n *Node) shipEvidence(ctx context.Context, cs *consensus.Consensus, job, member string, evidence []byte) error {
	if len(evidence) <= consensus.MaxEvidenceBytes {
		return cs.ShipEvidence(ctx, job, member, evidence)
	}
	if int64(len(evidence)) > consensus.MaxEvidenceBlobBytes {
		return fmt.Errorf("evidence of %d bytes (max %d): %w", len(evidence), consensus.MaxEvidenceBlobBytes, consensus.ErrTooLarge)
	}
	id, err := n.data.blobs.Publish(ctx, bytes.NewReader(evidence))
	if err != nil {
		return fmt.Errorf("publish evidence: %w", err)
	}
	withdraw := n.evidence.add(id)
	drop := func() {
		withdraw()
		if !n.evidence.has(id) {
			_ = n.data.blobs.Store().Remove(id)
		}
	}
	if err := cs.ShipEvidenceBlob(ctx, job, member, id, int64(len(evidence))); err != nil {
		drop()
		return err
	}
	time.AfterFunc(evidenceOfferTTL, drop) // a blob a crash leaves is an orphan the collector removes
	return nil
}

// serveEvidence decides a fetch of an evidence blob this node announced: only the current
// leader, the judge it was shipped to, may fetch it. ok is false when id is not one.
func (n *Node) serveEvidence(to peer.ID, id string) (ok bool, err error) {
	if !n.evidence.has(id) {
		return false, nil
	}
	if c := n.Consensus(); c == nil || c.Leader() != to {
		return true, errors.New("an evidence blob is served to the leader only")
	}
	return true, nil
}

// fetchEvidence is the leader's consensus.EvidenceFetcher: the blob reporter announced,
// from reporter only, at most the announced size and the job's bound, read verified and
// deleted. A blob a job names (a dataset, a shard of one, a checkpoint file) or that this
// node already holds is refused rather than fetched: it is not evidence shipped for this
// judgement, and deleting it after would lose it (even one this node is fetching for a
// job at the moment).
func (n *Node) fetchEvidence(ctx context.Context, j consensus.Job, reporter peer.ID, id string, size int64) ([]byte, error) {
	if !blob.ValidID(id) {
		return nil, fmt.Errorf("evidence blob ID %.16q is not a blob ID", id)
	}
	if bound := evidenceBound(j); size > bound {
		return nil, fmt.Errorf("evidence blob of %d bytes, more than job %s's evidence can be (%d): %w", size, j.ID, bound, blob.ErrTooLarge)
	}
	if jobs, err := n.policyJobs(); err != nil {
		return nil, err
	} else if jobsName(jobs, id) || n.data.partOfLiveDataset(jobs, id) {
		return nil, fmt.Errorf("evidence blob %.16s… is a job's dataset or checkpoint file", id)
	}
	b := n.data.blobs
	if b.Has(id) {
		return nil, fmt.Errorf("evidence blob %.16s… is a blob this node already holds", id)
	}
	if err := b.FetchAtMost(ctx, id, []peer.ID{reporter}, size); err != nil {
		return nil, err
	}
	defer func() { _ = b.Store().Remove(id) }()
	data, err := b.Store().ReadVerified(id)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("evidence blob of %d bytes, announced %d", len(data), size)
	}
	return data, nil
}

// evidenceBound is the most bytes an evidence of job j can have (scheduler.EvidenceBound
// for its current plan's nodes), within consensus.MaxEvidenceBlobBytes.
func evidenceBound(j consensus.Job) int64 {
	return min(scheduler.EvidenceBound(j.Spec, len(planNodes(j))), consensus.MaxEvidenceBlobBytes)
}

// jobsName reports whether a job names blob id: its dataset or a file of its checkpoints.
func jobsName(jobs []consensus.Job, id string) bool {
	for _, j := range jobs {
		if j.Spec.Data.Blob == id || checkpointHolds(j, id) {
			return true
		}
	}
	return false
}
