package runner

import "testing"

// The data plane keeps the frames of the jobs this node runs a worker of and lets the
// others expire (issue 25): RunsFrameJob names exactly those, by the id frames carry.
func TestRunsFrameJobNamesTheJobsRunHere(t *testing.T) {
	r := &Runner{runs: map[string]*jobRun{"job-a": {}}}
	if !r.RunsFrameJob(frameJob("job-a")) {
		t.Error("a job with a worker here is not run here")
	}
	if r.RunsFrameJob(frameJob("job-b")) || r.RunsFrameJob(0) {
		t.Error("a job without a worker here counts as run here")
	}
}
