package scheduler

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/consensus/jobspec"
)

// localSpec is a DiLoCo job on the local dataset "clinic": the balancer chooses the
// stages.
func localSpec() jobspec.Spec {
	s := jobspec.DefaultSpec()
	s.Data = jobspec.Data{Local: "clinic"}
	s.Parallel.Sync, s.Parallel.Stages, s.Parallel.Replicas = jobspec.SyncDiLoCo, jobspec.Auto(), jobspec.Auto()
	return s
}

// TestLocalDataPlacesReplicasOnlyOnNodesThatHaveIt: a data.local job is planned only on the
// nodes whose profile lists the dataset, each replica on one node (one stage), whatever the
// other nodes offer; with no such node, the plan fails naming data.local and the flag.
func TestLocalDataPlacesReplicasOnlyOnNodesThatHaveIt(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e"}
	ms := members(ids...)
	ms[4].Profile.GFLOPS = 10000 // the fastest node has no such data
	for _, i := range []int{0, 2, 3} {
		ms[i].Profile.LocalData = []string{"other", "clinic"}
	}
	ms[1].Profile.LocalData = []string{"clinic-b"}
	s := localSpec()
	s.Parallel.Replicas = jobspec.Fixed(3)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	jp, err := PlanJob(s, ms, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var used []string
	for _, r := range jp.Replicas {
		if len(r) != 1 {
			t.Fatalf("a replica of %d stages: %+v", len(r), jp.Replicas)
		}
		used = append(used, r[0].Node)
	}
	slices.Sort(used)
	if !slices.Equal(used, []string{"a", "c", "d"}) {
		t.Fatalf("replicas on %v, want one on each of a, c, d (the nodes with clinic)", used)
	}
	// One replica whose model a node's memory barely holds: without data.local the balancer
	// would cut it into a pipeline across nodes; with it, the replica stays on one node.
	s.Parallel.Replicas = jobspec.Fixed(1)
	for i := range ms {
		ms[i].Profile.MemoryBytes = int64(s.EstimatedTrainingBytes() * 6 / 10)
	}
	if jp, err := PlanJob(s, ms, Config{}); err == nil && len(jp.Replicas[0]) != 1 {
		t.Fatalf("a data.local replica cut into %d stages", len(jp.Replicas[0]))
	}
	for i := range ms {
		ms[i].Profile.LocalData = nil
	}
	if _, err := PlanJob(s, ms, Config{}); err == nil || !strings.Contains(err.Error(), "data.local") || !strings.Contains(err.Error(), "--local-data clinic=PATH") {
		t.Fatalf("no node with the dataset: got %v, want an error naming data.local and the flag", err)
	}
	// A job without data.local still plans on every node.
	s.Data = jobspec.Data{Source: jobspec.BuiltinGoStd}
	if _, err := PlanJob(s, ms, Config{}); err != nil {
		t.Fatal(err)
	}
}

// TestPlanRecordsEachReplicasShards: a sharded dataset's training shards are assigned to the
// plan's replicas (model.ReplicaShards) and the assignment is in the committed plan; a
// replica lost in place takes its shards with it, the survivors keep theirs.
func TestPlanRecordsEachReplicasShards(t *testing.T) {
	s := jobspec.DefaultSpec()
	s.Parallel.Sync, s.Parallel.Stages, s.Parallel.Replicas = jobspec.SyncDiLoCo, jobspec.Fixed(1), jobspec.Fixed(3)
	s.Data.Blob, s.Data.TrainShards = strings.Repeat("ab", 32), 7
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	ms := members("a", "b", "c")
	jp, err := PlanJob(s, ms, Config{})
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int{{0, 3, 6}, {1, 4}, {2, 5}}
	if len(jp.DataShards) != 3 || !slices.EqualFunc(jp.DataShards, want, slices.Equal) {
		t.Fatalf("data shards %v, want %v", jp.DataShards, want)
	}
	j := Job{ID: "j", Spec: s, Status: jobspec.JobRunning, Epoch: 1, Plan: &jp}
	dead := jp.Replicas[1][0].Node
	d := continueWithout(j, newLiveness(with(ms, dead, MemberDead), "a"))
	if d == nil || !slices.EqualFunc(d.Plan.DataShards, [][]int{want[0], want[2]}, slices.Equal) {
		t.Fatalf("continued without replica 1: %+v", d)
	}
	s.Data.TrainShards = 0
	if jp, _ := PlanJob(s, ms, Config{}); jp.DataShards != nil {
		t.Fatalf("an unsharded dataset got shards %v", jp.DataShards)
	}
}
