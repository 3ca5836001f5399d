package node

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/mesh"
)

// TestDatasetOfLiveJob: a member may make this node hold a blob as a dataset only while
// the blob is the dataset of a job that has not ended (what a pull at submit asks for);
// any other blob, or the dataset of a finished job, is not a dataset replica.
func TestDatasetOfLiveJob(t *testing.T) {
	job := func(blob string, s jobspec.JobStatus) consensus.Job {
		j := consensus.Job{ID: "j-" + blob, Status: s, Spec: jobspec.DefaultSpec()}
		j.Spec.Data.Blob = blob
		return j
	}
	jobs := []consensus.Job{job("aa", jobspec.JobSubmitted), job("bb", jobspec.JobRunning), job("cc", jobspec.JobDone)}
	for hash, want := range map[string]bool{"aa": true, "bb": true, "cc": false, "dd": false, "": false} {
		if got := datasetOfLiveJob(jobs, hash); got != want {
			t.Errorf("blob %q: dataset of a live job %v, want %v", hash, got, want)
		}
	}
}

// TestReplicaCandidates: only live peers whose announced free disk holds the dataset are
// asked, most free disk first.
func TestReplicaCandidates(t *testing.T) {
	id := func(s string) peer.ID { return peer.ID(s) }
	prof := func(free uint64) *mesh.Profile { return &mesh.Profile{DiskFreeBytes: free} }
	peers := []mesh.PeerInfo{
		{ID: id("a"), State: mesh.StateAlive, Profile: prof(10 << 30)},
		{ID: id("b"), State: mesh.StateAlive, Profile: prof(50 << 30)},
		{ID: id("c"), State: mesh.StateDead, Profile: prof(90 << 30)},
		{ID: id("d"), State: mesh.StateAlive, Profile: prof(1 << 20)}, // too small for the 2 MiB dataset
		{ID: id("e"), State: mesh.StateAlive},                         // no profile yet
		{ID: id("f"), State: mesh.StateAlive, Profile: prof(10 << 30)},
	}
	got := replicaCandidates(peers, 2<<20)
	want := []peer.ID{"b", "a", "f"}
	if len(got) != len(want) {
		t.Fatalf("candidates %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("candidates %v, want %v", got, want)
		}
	}
}

// TestDatasetReplicasConfig: zero is the default of one replica, negative none.
func TestDatasetReplicasConfig(t *testing.T) {
	for in, want := range map[int]int{0: DefaultDatasetReplicas, -1: 0, 3: 3} {
		if got := (Config{DatasetReplicas: in}).datasetReplicas(); got != want {
			t.Errorf("DatasetReplicas %d: %d replicas, want %d", in, got, want)
		}
	}
}
