package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshnode/meshnode/internal/testutil"
)

type raftStatusJSON struct {
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	Voters       []string `json:"voters"`
	Nonvoters    []string `json:"nonvoters"`
	AppliedIndex uint64   `json:"applied_index"`
}

type jobSummaryJSON struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Status      string    `json:"status"`
	SubmittedAt time.Time `json:"submitted_at"`
}

// TestSubmitSurvivesLeaderKill is acceptance 5 of the consensus issue: three real `meshnode
// join` processes form a Raft group, a job submitted with `meshnode submit` through a
// follower is on every node, the leader process is killed with SIGKILL, and the survivors
// elect a new leader and still list the job with `meshnode jobs -o json`.
func TestSubmitSurvivesLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("execs the binary")
	}
	if raceEnabled {
		t.Skip("execs real processes: the race pass only adds load (see race_test.go)")
	}
	bin := meshnodeBinary(t)
	first := startJoin(t, bin) // no --bootstrap: founds the Raft group
	infoFirst := first.runtime(t)
	procs := []*joinProcess{first, startJoin(t, bin, infoFirst.Addrs...), startJoin(t, bin, infoFirst.Addrs...)}
	// The CLI reaches each node through its data dir: API address and token.
	dirs := map[string]string{} // peer ID → data dir
	byID := map[string]*joinProcess{}
	for _, p := range procs {
		info := p.runtime(t)
		dirs[info.ID], byID[info.ID] = p.dataDir, p
	}
	var st raftStatusJSON
	testutil.WaitFor(t, 60*time.Second, "three raft voters", func() bool {
		st = cliRaftStatus(t, bin, first.dataDir)
		return len(st.Voters) == 3 && st.Leader != ""
	})
	t.Logf("raft group of 3 voters, leader %s", st.Leader)
	var follower string
	for id := range dirs {
		if id != st.Leader {
			follower = id
		}
	}
	jobID := cliSubmit(t, bin, dirs[follower], "name: survives-kill\ntrain: {steps: 10, warmup: 1}\n")
	listed := func(dir string, extra ...string) bool {
		return cliListsJob(t, bin, dir, jobID, "survives-kill", extra...)
	}
	for id, dir := range dirs {
		testutil.WaitFor(t, 20*time.Second, "the job on "+id, func() bool { return listed(dir) })
	}

	t.Logf("job %s on all nodes; killing the leader", jobID)
	leader := byID[st.Leader]
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.exited
	leader.exited <- nil // for the cleanup
	delete(dirs, st.Leader)
	for id, dir := range dirs {
		testutil.WaitFor(t, 30*time.Second, "a new leader seen by "+id, func() bool {
			s := cliRaftStatus(t, bin, dir)
			return s.Leader != "" && s.Leader != st.Leader
		})
		t.Logf("%s sees a new leader", id)
		// A consistent read goes through the new leader: the committed job survived.
		testutil.WaitFor(t, 20*time.Second, "the job on survivor "+id, func() bool { return listed(dir, "--consistent") })
	}
	// The engine carries on under the new leader (replanning if the old leader held a
	// stage) and the job finishes.
	testutil.WaitFor(t, 90*time.Second, "the job to finish done", func() bool {
		out, err := cli(t, bin, "job", "status", jobID, "-o", "json", "--data-dir", dirs[follower])
		return err == nil && strings.Contains(string(out), `"status":"done"`)
	})
}

// cliRaftStatus is `meshnode raft status -o json` against the node of data dir dir; the zero
// value while the command fails.
func cliRaftStatus(t *testing.T, bin, dir string) raftStatusJSON {
	var st raftStatusJSON
	if out, err := cli(t, bin, "raft", "status", "-o", "json", "--data-dir", dir); err == nil {
		_ = json.Unmarshal(out, &st)
	}
	return st
}

// cliSubmit writes spec to a file and submits it with `meshnode submit` through the node of
// data dir dir, returning the job's ID.
func cliSubmit(t *testing.T, bin, dir, spec string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := cli(t, bin, "submit", file, "-o", "json", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &sub); err != nil || sub.ID == "" {
		t.Fatalf("submit -o json = %q (%v)", out, err)
	}
	return sub.ID
}

// cliListsJob reports whether `meshnode jobs -o json` (with extra flags) through the node of
// data dir dir lists job id named name with a status and a submission time.
func cliListsJob(t *testing.T, bin, dir, id, name string, extra ...string) bool {
	out, err := cli(t, bin, append([]string{"jobs", "-o", "json", "--data-dir", dir}, extra...)...)
	if err != nil {
		return false
	}
	var jobs []jobSummaryJSON
	return json.Unmarshal(out, &jobs) == nil && slices.ContainsFunc(jobs, func(j jobSummaryJSON) bool {
		return j.ID == id && j.Name == name && j.Status != "" && !j.SubmittedAt.IsZero()
	})
}
