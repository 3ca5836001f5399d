package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/mesh"
	blobpkg "github.com/meshnode/meshnode/mesh/blob"
)

// DefaultDatasetReplicas is how many members besides the submitting node hold a job's
// dataset before `submit` answers (Config.DatasetReplicas).
const DefaultDatasetReplicas = 1

// datasetReplicaTimeout bounds replicating one dataset at submit, over every member asked.
const datasetReplicaTimeout = 2 * time.Minute

// datasetRefusalTimeout bounds how long one member that refuses the pull is asked again
// (its control plane has not applied the job yet); then the next candidate is asked.
const datasetRefusalTimeout = 10 * time.Second

// datasetOfLiveJob reports whether hash is the dataset blob (or the model.init weights'
// blob) of a job that has not ended.
func datasetOfLiveJob(jobs []consensus.Job, hash string) bool {
	if hash == "" {
		return false // a job without model.init has no init blob: "" names nothing
	}
	for _, j := range jobs {
		if (j.Spec.Data.Blob == hash || j.Spec.Model.InitBlob == hash) && !j.Status.Terminal() {
			return true
		}
	}
	return false
}

// datasetReplicas is Config.DatasetReplicas: 0 means DefaultDatasetReplicas, negative none.
func (c Config) datasetReplicas() int {
	switch {
	case c.DatasetReplicas == 0:
		return DefaultDatasetReplicas
	case c.DatasetReplicas < 0:
		return 0
	}
	return c.DatasetReplicas
}

// replicateDataset has up to Config.DatasetReplicas live members besides this node fetch
// blob, the dataset of job (which the control plane already holds, so they accept it:
// acceptReplica), and returns the members that hold it. Members with the most free disk
// are asked first; a member that refuses because its control plane has not applied the
// job yet is asked again until ctx ends. Fewer holders than asked for (a mesh of one, a
// full disk) is not an error: the job runs, its dataset only on this node.
func (n *Node) replicateDataset(ctx context.Context, job, blob string) ([]string, error) {
	want := n.cfg.datasetReplicas()
	if want == 0 || blob == "" {
		return nil, nil
	}
	// A sharded dataset is its manifest, then every shard: the manifest goes first, so
	// that the member can check that each shard belongs to a live job's dataset.
	all := append([]string{blob}, n.data.parts(blob)...)
	var size int64
	for _, b := range all {
		m, err := n.data.blobs.Store().Manifest(b)
		if err != nil {
			return nil, fmt.Errorf("dataset of job %s: %w", job, err)
		}
		size += m.Size
	}
	var holders []string
	var errs []error
	for _, p := range replicaCandidates(n.mesh.Peers(), uint64(size)) {
		if len(holders) == want {
			break
		}
		if err := n.replicateAll(ctx, p, all); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		holders = append(holders, p.String())
	}
	if len(holders) < want {
		n.log.Warn("dataset held by fewer members than asked", "job", job, "blob", blob, "holders", len(holders)+1,
			"want", want+1, "err", errors.Join(errs...))
	}
	return holders, nil
}

// replicateAll asks p to pull every blob of blobs, in order.
func (n *Node) replicateAll(ctx context.Context, p peer.ID, blobs []string) error {
	for _, b := range blobs {
		if err := n.replicateTo(ctx, p, b); err != nil {
			return err
		}
	}
	return nil
}

// replicateTo asks p to pull blob. A refusal (p's control plane may lag the commit that
// made the job, and with it the dataset, known) is asked again for up to
// datasetRefusalTimeout; any other failure (the transfer itself) ends the try at once.
func (n *Node) replicateTo(ctx context.Context, p peer.ID, blob string) error {
	deadline := time.Now().Add(datasetRefusalTimeout)
	wait := 100 * time.Millisecond
	for {
		err := n.data.blobs.Replicate(ctx, p, blob)
		if err == nil || !errors.Is(err, blobpkg.ErrRefused) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// replicaCandidates are the live peers whose announced free disk holds size bytes, most
// free disk first (ties by ID, so the choice is stable).
func replicaCandidates(peers []mesh.PeerInfo, size uint64) []peer.ID {
	var ok []mesh.PeerInfo
	for _, pi := range peers {
		if pi.State == mesh.StateAlive && pi.Profile != nil && pi.Profile.DiskFreeBytes > size {
			ok = append(ok, pi)
		}
	}
	slices.SortStableFunc(ok, func(a, b mesh.PeerInfo) int {
		if a.Profile.DiskFreeBytes != b.Profile.DiskFreeBytes {
			if a.Profile.DiskFreeBytes > b.Profile.DiskFreeBytes {
				return -1
			}
			return 1
		}
		return compareIDs(a.ID, b.ID)
	})
	out := make([]peer.ID, len(ok))
	for i, pi := range ok {
		out[i] = pi.ID
	}
	return out
}

func compareIDs(a, b peer.ID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
