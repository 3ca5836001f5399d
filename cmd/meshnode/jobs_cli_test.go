package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/model"
	"github.com/meshnode/meshnode/parallel"
)

func runJobCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// The job spec copies the train recipe rather than importing it (jobspec is a leaf); this
// keeps the copy honest. The model's shape is one type (model.Config is jobspec.Model), so
// only the default spec's use of it is checked.
func TestJobSpecDefaultsMatchModelAndTrainer(t *testing.T) {
	s, m := jobspec.DefaultSpec(), model.DefaultConfig()
	if model.Config(s.Model) != m {
		t.Fatalf("jobspec model defaults %+v ≠ model.DefaultConfig() %+v", s.Model, m)
	}
	tc := parallel.DefaultTrainConfig()
	tr := s.Train
	if tr.Steps != tc.Steps || tr.Batch != tc.Batch || tr.LR != tc.LR || tr.Warmup != tc.Warmup || tr.Seed != tc.Seed || tr.EvalEvery != tc.EvalEvery {
		t.Fatalf("jobspec train defaults %+v differ from parallel.DefaultTrainConfig() %+v", tr, tc)
	}
	if s.Data.Source != tc.Data {
		t.Fatalf("default data %q ≠ %q", s.Data.Source, tc.Data)
	}
}

// fakeAPI is a minimal node API: it records requests and answers from a job table.
type fakeAPI struct {
	mu        sync.Mutex
	submitted []jobspec.Spec
	jobs      map[string]consensus.Job
	// initial is the status new jobs get (submitted unless a test says otherwise).
	initial consensus.JobStatus
	// verifier checks signed requests as a node holding its token does (t0ken unless a
	// test says otherwise).
	verifier *api.Verifier
	// auth records, for each request, "signed" (a valid signature), "" (none) or why its
	// signature was refused; roots the data-root header of each POST.
	auth, roots []string
	// lag is how many reads of a job answer 404 before it shows, as on a node whose
	// replica has not applied the submission yet.
	lag int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	if r.URL.Path == api.ProofPath {
		f.verifier.ServeProof(w, r)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, "/v1/jobs/")
	f.auth = append(f.auth, f.check(r))
	if r.Method == http.MethodPost {
		f.roots = append(f.roots, r.Header.Get(api.DataRootHeader))
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/jobs":
		b, _ := io.ReadAll(r.Body)
		spec, err := jobspec.Parse(b)
		if err != nil {
			reply(http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		f.submitted = append(f.submitted, spec)
		status := f.initial
		if status == "" {
			status = consensus.JobSubmitted
		}
		f.jobs["abc123"] = consensus.Job{ID: "abc123", Name: spec.Name, Spec: spec, Status: status, SubmittedAt: time.Now()}
		reply(http.StatusCreated, consensus.SubmitResult{ID: "abc123"})
	case r.Method == http.MethodGet && r.URL.Path == "/v1/jobs":
		out := []consensus.JobSummary{}
		for _, j := range f.jobs {
			out = append(out, j.Summary())
		}
		reply(http.StatusOK, out)
	case r.Method == http.MethodGet:
		j, ok := f.jobs[id]
		if !ok || f.lag > 0 {
			f.lag = max(f.lag-1, 0)
			reply(http.StatusNotFound, map[string]string{"error": "job " + id + " not found"})
			return
		}
		reply(http.StatusOK, j.Detail(7))
	case r.Method == http.MethodDelete:
		j, ok := f.jobs[id]
		switch {
		case !ok:
			reply(http.StatusNotFound, map[string]string{"error": "job " + id + " not found"})
		case j.Status.Terminal():
			reply(http.StatusConflict, map[string]string{"error": "job " + id + " is " + string(j.Status)})
		default:
			j.Status = consensus.JobCancelled
			f.jobs[id] = j
			reply(http.StatusOK, j.Summary())
		}
	default:
		reply(http.StatusNotFound, map[string]string{"error": "no route"})
	}
}

// check returns what f.auth records for r, leaving r's body readable.
func (f *fakeAPI) check(r *http.Request) string {
	if !api.IsSigned(r) {
		return r.Header.Get("Authorization")
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err := f.verifier.Verify(r, body); err != nil {
		return err.Error()
	}
	return "signed"
}

// startFakeAPI starts a fake node that holds the token "t0ken".
func startFakeAPI(t *testing.T) (*fakeAPI, string) {
	return startFakeAPIWithToken(t, "t0ken")
}

// startFakeAPIWithToken starts a fake node that holds token: it proves it, checks the
// signatures of requests and signs its answers, as a node does.
func startFakeAPIWithToken(t *testing.T, token string) (*fakeAPI, string) {
	f := &fakeAPI{jobs: map[string]consensus.Job{}, verifier: api.NewVerifier(token, "")}
	srv := httptest.NewServer(f.verifier.SignAnswers(f))
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func writeSpec(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSubmitInvalidSpecExits2(t *testing.T) {
	_, url := startFakeAPI(t)
	for body, field := range map[string]string{
		"parallel: {inner_steps: 0}\n":                       "parallel.inner_steps: must be ≥ 1, got 0",
		"model: {layerz: 3}\n":                               "model.layerz: unknown field",
		"data: {train: missing.bin, val: missing-val.bin}\n": "data.train: ",
		"data: {source: ., tokenizer: missing.json}\n":       "data.tokenizer: ",
		"model: {init: missing-dir}\n":                       "model.init: ",
		"model: {init: .}\n":                                 "config.json: no such file or directory",
		"model: {init: ., layers: 3}\n":                      "model.layers: the model is model.init's config.json",
		"model: {init: ., context: 64}\n":                    "config.json: no such file or directory", // context may be written beside init
	} {
		code, out, errOut := runJobCLI(t, "submit", writeSpec(t, body), "--api", url)
		if code != 2 || out != "" || !strings.Contains(errOut, field) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and one line naming %q", body, code, out, errOut, field)
		}
	}
	if code, _, errOut := runJobCLI(t, "submit", filepath.Join(t.TempDir(), "nope.yaml"), "--api", url); code != 2 || !strings.Contains(errOut, "nope.yaml") {
		t.Errorf("missing file: exit %d %q", code, errOut)
	}
}

func TestSubmitJobsStatusCancel(t *testing.T) {
	f, url := startFakeAPI(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "corpus.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(spec, []byte("name: cli-test\ndata: {source: corpus.txt}\nparallel: {audit: 0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("MESHNODE_API", url)
	t.Setenv("MESHNODE_TOKEN", "t0ken")
	code, out, errOut := runJobCLI(t, "submit", spec, "-o", "json", "--data-root", dir)
	if code != 0 || strings.TrimSpace(out) != `{"id":"abc123"}` {
		t.Fatalf("submit: exit %d out %q err %q", code, out, errOut)
	}
	if f.auth[0] != "signed" || f.roots[0] != dir {
		t.Fatalf("submit's signature: %q, data root %q; want signed with the token of MESHNODE_TOKEN and %s", f.auth[0], f.roots[0], dir)
	}
	if got := f.submitted[0].Data.Source; got != filepath.Join(dir, "corpus.txt") {
		t.Fatalf("data path sent as %q, want it resolved against the spec's directory", got)
	}
	if got := f.submitted[0].Parallel.Audit; got != jobspec.Pinned(0) {
		// The stored JSON leaves a zero out, and the node reads what is left out as the
		// default ("auto"): the CLI sends the spec's Document.
		t.Fatalf("parallel.audit: 0 was submitted as %v", got)
	}

	code, out, _ = runJobCLI(t, "jobs", "-o", "json")
	var list []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 {
		t.Fatalf("jobs -o json: exit %d %q", code, out)
	}
	for _, k := range []string{"id", "name", "status", "submitted_at"} {
		if _, ok := list[0][k]; !ok {
			t.Errorf("jobs -o json lacks %q: %s", k, out)
		}
	}
	if code, out, _ = runJobCLI(t, "jobs"); code != 0 || !strings.Contains(out, "cli-test") || !strings.Contains(out, "submitted") {
		t.Fatalf("jobs: %d %q", code, out)
	}

	code, out, _ = runJobCLI(t, "job", "status", "abc123", "-o", "json")
	var detail map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &detail) != nil {
		t.Fatalf("job status -o json: %d %q", code, out)
	}
	for _, k := range []string{"id", "name", "status", "spec", "plan", "progress", "events"} {
		if _, ok := detail[k]; !ok {
			t.Errorf("job status -o json lacks %q", k)
		}
	}
	if detail["plan"] != nil || detail["status"] != "submitted" {
		t.Errorf("fresh job: plan %v status %v", detail["plan"], detail["status"])
	}
	if code, out, _ = runJobCLI(t, "job", "status", "abc123"); code != 0 || !strings.Contains(out, "plan       none yet") {
		t.Fatalf("job status: %d %q", code, out)
	}

	if code, out, _ = runJobCLI(t, "job", "cancel", "abc123"); code != 0 || !strings.Contains(out, "cancelled job abc123") {
		t.Fatalf("cancel: %d %q", code, out)
	}
	if code, _, errOut = runJobCLI(t, "job", "cancel", "abc123"); code != 1 || !strings.Contains(errOut, "is cancelled") {
		t.Fatalf("second cancel: %d %q", code, errOut)
	}
	if code, _, errOut = runJobCLI(t, "job", "status", "nope"); code != 2 || !strings.Contains(errOut, "job nope not found") {
		t.Fatalf("status of unknown job: %d %q", code, errOut)
	}
	// --wait on a job that ends cancelled returns exit 1.
	f.mu.Lock()
	f.initial = consensus.JobCancelled
	f.mu.Unlock()
	if code, out, _ = runJobCLI(t, "submit", spec, "--wait", "--poll", "10ms"); code != 1 {
		t.Fatalf("submit --wait on a cancelled job: %d %q", code, out)
	}
	// Submitted through a follower, the job reaches the leader first: --wait reads the
	// local replica, which may not have applied it yet, and waits for it.
	f.mu.Lock()
	f.initial, f.lag = consensus.JobDone, 3
	f.mu.Unlock()
	if code, out, errOut = runJobCLI(t, "submit", spec, "--wait", "--poll", "10ms"); code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("submit --wait with a lagging replica: %d %q %q", code, out, errOut)
	}
}

func TestJobCommandsWithoutNode(t *testing.T) {
	code, _, errOut := runJobCLI(t, "jobs", "--api", "127.0.0.1:1")
	if code != 1 || !strings.Contains(errOut, "cannot reach the meshnode API") {
		t.Fatalf("exit %d %q", code, errOut)
	}
	if code, _, _ := runJobCLI(t, "jobs", "-o", "yaml"); code != 2 {
		t.Fatalf("bad -o: exit %d", code)
	}
}

// TestCLIFindsNodeThroughDataDir: with only --data-dir, the CLI reads the running node's
// API address from its runtime file and its token from api.token; a token file others can
// read is refused; and the default data root is the working directory.
func TestCLIFindsNodeThroughDataDir(t *testing.T) {
	dataDir := t.TempDir()
	tok, err := api.LoadOrCreateToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	f, url := startFakeAPIWithToken(t, tok)
	writeRuntimeFile(t, dataDir, url, os.Getpid(), true)
	t.Setenv("MESHNODE_API", "")
	os.Unsetenv("MESHNODE_API")
	if code, out, errOut := runJobCLI(t, "jobs", "--data-dir", dataDir, "-o", "json"); code != 0 || len(f.auth) != 1 || f.auth[0] != "signed" {
		t.Fatalf("jobs --data-dir: exit %d %q %q; the fake API saw %q, want a request signed with the data dir's token", code, out, errOut, f.auth)
	}
	wd, _ := os.Getwd()
	if code, _, errOut := runJobCLI(t, "submit", writeSpec(t, "name: x\n"), "--data-dir", dataDir); code != 0 || f.roots[0] != wd {
		t.Fatalf("submit: exit %d %q; data root sent %q, want the working directory %s", code, errOut, f.roots, wd)
	}
	if err := os.Chmod(filepath.Join(dataDir, api.TokenFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runJobCLI(t, "jobs", "--data-dir", dataDir); code == 0 || !strings.Contains(errOut, "chmod 600") {
		t.Fatalf("jobs with a world-readable token: exit %d %q; want a refusal saying chmod 600", code, errOut)
	}
}
