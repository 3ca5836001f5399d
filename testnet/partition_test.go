package testnet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// minoritySubmitLimit bounds a submit through a node cut off from the Raft majority: the
// node's job API gives up after 15 s (node.jobAPITimeout); a hang would reach the
// client's 30 s.
const minoritySubmitLimit = 25 * time.Second

// TestControlPlanePartition (issue 26, part 6): three voters are split into a minority of
// one and a majority of two, twice: first with the Raft leader in the minority, then with
// a follower there. Each time the minority refuses a submit with a clear error well
// within its timeout; the majority elects (or keeps) a leader and runs a job submitted
// there on its own nodes; after healing, every node converges on the same jobs with the
// same statuses and plans, no job has two plans for one epoch, and the minority's
// rejected job never appears. With `testnet partition` cutting only the data plane it
// fails in the first round: the majority never elects a leader of its own and keeps
// seeing the cut-off leader alive.
func TestControlPlanePartition(t *testing.T) {
	requireScenarios(t)
	if testing.Short() {
		t.Skip("three processes and two jobs through two partitions: not in -short mode")
	}
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	parallelScenario(t)
	start := time.Now()
	tn := startTestnet(t, oneRegion(3))
	plans := planLedger{}
	for round, leaderInMinority := range []bool{true, false} {
		leader := currentLeader(t, tn)
		minority, majority := splitOne(tn, leader, leaderInMinority)
		t.Logf("round %d: minority %s (leader %v), majority %s and %s", round, minority.Spec.Name,
			leaderInMinority, majority[0].Spec.Name, majority[1].Spec.Name)
		cut := time.Now()
		for _, m := range majority {
			if err := tn.Partition(minority.Spec.Name, m.Spec.Name); err != nil {
				t.Fatal(err)
			}
		}
		// Submit through the minority at once: in the first round it may still be the
		// leader for its lease and append the entry to its own log, which it can never
		// commit.
		rejected := fmt.Sprintf("rejected-%d", round)
		spec := namedJob(t, rejected, 20)
		type answer struct {
			err  error
			took time.Duration
		}
		refused := make(chan answer, 1)
		go func() {
			_, err := minority.Client().Submit(context.Background(), spec, os.TempDir())
			refused <- answer{err, time.Since(cut)}
		}()
		newLeader := waitMajorityLeader(t, tn, minority, majority)
		t.Logf("round %d: majority leader %s after %.1f s", round, short(newLeader), time.Since(cut).Seconds())
		w := submitJob(t, tn, majority[0], namedJob(t, fmt.Sprintf("majority-%d", round), 20))

		r := <-refused
		var apiErr *api.Error
		if r.err == nil || !errors.As(r.err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable {
			t.Fatalf("round %d: a submit through the minority node answered %v, want 503 (no Raft leader)", round, r.err)
		}
		if r.took > minoritySubmitLimit {
			t.Fatalf("round %d: the minority's submit failed only %s after the cut (limit %s): %v", round, r.took, minoritySubmitLimit, r.err)
		}
		t.Logf("round %d: minority submit refused %.1f s after the cut: %v", round, r.took.Seconds(), r.err)

		d := w.waitDone(3 * time.Minute)
		plans.record(majority[0].Spec.Name, d)
		used := planOf(d).Nodes()
		if len(used) == 0 || slices.Contains(used, minority.ID) {
			t.Fatalf("round %d: the majority's job ran on %v; the minority node is %s", round, used, short(minority.ID))
		}
		t.Logf("round %d: job %s done on %d majority node(s), plan epoch %d", round, d.ID, len(used), d.Plan.Epoch)

		for _, m := range majority {
			if err := tn.Heal(minority.Spec.Name, m.Spec.Name); err != nil {
				t.Fatal(err)
			}
		}
		healed := time.Now()
		waitConverged(t, tn, plans, rejected)
		t.Logf("round %d: converged %.1f s after healing", round, time.Since(healed).Seconds())
	}
	t.Logf("control-plane partition scenario: %.0f s in all", time.Since(start).Seconds())
}

// namedJob is faultJob (even placement over the live nodes, one replica) under another name.
func namedJob(t *testing.T, name string, steps int) []byte {
	var spec jobspec.Spec
	json.Unmarshal(faultJob(t, steps), &spec)
	spec.Name = name
	b, _ := spec.Document()
	return b
}

// splitOne picks the node to cut off: the leader, or a follower.
func splitOne(tn *Testnet, leader string, leaderInMinority bool) (minority *Node, majority []*Node) {
	for _, n := range tn.Nodes() {
		if (n.ID == leader) == leaderInMinority && minority == nil {
			minority = n
		} else {
			majority = append(majority, n)
		}
	}
	return minority, majority
}

// waitMajorityLeader waits until both majority nodes name the same leader among them and
// see the minority node dead (so the scheduler cannot plan on it), and the minority node
// names no leader it can reach: a cut that left Raft connected fails here.
func waitMajorityLeader(t *testing.T, tn *Testnet, minority *Node, majority []*Node) string {
	t.Helper()
	var leader string
	err := tn.WaitFor(func() bool {
		l0, l1 := leaderOf(t, majority[0]), leaderOf(t, majority[1])
		if l0 == "" || l0 != l1 || l0 == minority.ID {
			return false
		}
		for _, m := range majority {
			if slices.Contains(alivePeers(m), minority.ID) {
				return false
			}
		}
		s, err := minority.Client().Raft(context.Background())
		if err != nil || s.State == "Leader" {
			return false
		}
		leader = l0
		return true
	}, 30*time.Second)
	if err != nil {
		st, _ := minority.Client().Raft(context.Background())
		t.Fatalf("the majority has no leader of its own or still sees the minority (minority's raft: %+v): %v", st, err)
	}
	return leader
}

// waitConverged waits until every node sees the others alive and names the same leader, and its
// own FSM holds the same jobs, statuses and plans as the others; a consistent read
// through each node must agree too. Then no job is named rejected.
func waitConverged(t *testing.T, tn *Testnet, plans planLedger, rejected string) {
	t.Helper()
	var last string
	err := tn.WaitFor(func() bool {
		var ref []byte
		leader := leaderOf(t, tn.Nodes()[0])
		for _, n := range tn.Nodes() {
			if len(alivePeers(n)) != len(tn.Nodes())-1 {
				last = n.Spec.Name + " does not see every peer alive"
				return false
			}
			if l := leaderOf(t, n); l == "" || l != leader {
				last = fmt.Sprintf("%s names leader %q, %s names %q", n.Spec.Name, l, tn.Nodes()[0].Spec.Name, leader)
				return false
			}
			view, err := jobView(n, plans, false)
			if err != nil {
				last = err.Error()
				return false
			}
			if ref != nil && !bytes.Equal(ref, view) {
				last = fmt.Sprintf("%s's jobs differ:\n%s\nvs\n%s", n.Spec.Name, view, ref)
				return false
			}
			ref = view
		}
		for _, n := range tn.Nodes() {
			view, err := jobView(n, plans, true)
			if err != nil || !bytes.Equal(ref, view) {
				last = fmt.Sprintf("%s's consistent read differs: %v", n.Spec.Name, err)
				return false
			}
		}
		return true
	}, 90*time.Second)
	if err != nil {
		t.Fatalf("no convergence after healing: %v; last: %s", err, last)
	}
	for _, n := range tn.Nodes() {
		for _, consistent := range []bool{false, true} {
			jobs, err := n.Client().Jobs(context.Background(), consistent)
			if err != nil {
				t.Fatalf("%s: jobs (consistent %v): %v", n.Spec.Name, consistent, err)
			}
			for _, j := range jobs {
				if j.Name == rejected {
					t.Fatalf("%s lists job %s (%s), which the minority refused (consistent read %v)", n.Spec.Name, j.ID, j.Name, consistent)
				}
			}
		}
	}
	plans.check(t)
}

// jobView is what a node holds of every job (ID, name, status, plan epoch and plan),
// encoded for comparison; every plan seen goes into plans.
func jobView(n *Node, plans planLedger, consistent bool) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs, err := n.Client().Jobs(ctx, consistent)
	if err != nil {
		return nil, fmt.Errorf("%s: jobs: %w", n.Spec.Name, err)
	}
	type row struct {
		ID, Name string
		Status   consensus.JobStatus
		Epoch    uint64
		Plan     json.RawMessage
	}
	var rows []row
	for _, j := range jobs {
		d, err := n.Client().Job(ctx, j.ID, consistent)
		if err != nil {
			return nil, fmt.Errorf("%s: job %s: %w", n.Spec.Name, j.ID, err)
		}
		r := row{ID: d.ID, Name: d.Name, Status: d.Status}
		if d.Plan != nil {
			r.Epoch, r.Plan = d.Plan.Epoch, d.Plan.Plan
			plans.add(n.Spec.Name, d.ID, d.Plan.Epoch, d.Plan.Plan)
		}
		rows = append(rows, r)
	}
	return json.Marshal(rows)
}

// planLedger is every plan any node showed, per job and epoch: two different plans for
// one epoch would be a fork of the job's state.
type planLedger map[string]map[uint64]map[string][]string // job → epoch → plan → nodes that showed it

func (l planLedger) add(node, job string, epoch uint64, plan json.RawMessage) {
	if l[job] == nil {
		l[job] = map[uint64]map[string][]string{}
	}
	if l[job][epoch] == nil {
		l[job][epoch] = map[string][]string{}
	}
	l[job][epoch][string(plan)] = append(l[job][epoch][string(plan)], node)
}

func (l planLedger) record(node string, d api.JobDetail) {
	if d.Plan != nil {
		l.add(node, d.ID, d.Plan.Epoch, d.Plan.Plan)
	}
}

func (l planLedger) check(t *testing.T) {
	t.Helper()
	for job, epochs := range l {
		for epoch, seen := range epochs {
			if len(seen) > 1 {
				t.Errorf("job %s has %d different plans for epoch %d: %v", job, len(seen), epoch, seen)
			}
		}
	}
}

func short(id string) string { return id[max(0, len(id)-6):] }
