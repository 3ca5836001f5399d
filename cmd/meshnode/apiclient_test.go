package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/meshnode/meshnode/api"
)

// writeRuntimeFile writes dataDir's node.json naming the API at url, as the process pid
// wrote it (with this process's start time when withStart).
func writeRuntimeFile(t *testing.T, dataDir, url string, pid int, withStart bool) {
	t.Helper()
	info := api.RuntimeInfo{ID: "", API: strings.TrimPrefix(url, "http://"), PID: pid}
	if withStart {
		start, err := api.ProcessStart(pid)
		if err != nil {
			t.Fatal(err)
		}
		info.Start = start
	}
	b, _ := json.Marshal(info)
	if err := os.WriteFile(filepath.Join(dataDir, api.RuntimeFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// recorder is a plain HTTP server on a random port, not a node: it records every request
// it receives (line, headers, body) and answers 200 with an empty JSON list.
type recorder struct {
	mu   sync.Mutex
	reqs []string
	url  string
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s\n", r.Method, r.RequestURI)
		r.Header.Write(&b)
		b.Write(body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, b.String())
		rec.mu.Unlock()
		w.Write([]byte("[]"))
	}))
	t.Cleanup(srv.Close)
	rec.url = srv.URL
	return rec
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.reqs...)
}

// TestCLIRefusesAnImpostor: another local user's plain HTTP server sits on the address a
// live node.json names (the node died and its port was taken, or the file was planted).
// The CLI says the process there is not the node of that data dir, and the server
// receives the challenge only: not the token, no signed request, no job spec.
func TestCLIRefusesAnImpostor(t *testing.T) {
	rec := startRecorder(t)
	dataDir := t.TempDir()
	tok, err := api.LoadOrCreateToken(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	writeRuntimeFile(t, dataDir, rec.url, os.Getpid(), true)
	unsetEnv(t, api.EnvAPI, api.EnvToken)
	addr := strings.TrimPrefix(rec.url, "http://")
	for _, args := range [][]string{
		{"jobs", "--data-dir", dataDir},
		{"submit", writeSpec(t, "name: secret-job\n"), "--data-dir", dataDir},
		{"jobs", "--api", addr, "--data-dir", dataDir}, // an explicit --api is held to the same proof
	} {
		code, out, errOut := runJobCLI(t, args...)
		want := "the process at http://" + addr + " is not the meshnode node of data dir " + dataDir + ":"
		if code != 1 || out != "" || !strings.Contains(errOut, want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 saying %q", args, code, out, errOut, want)
		}
	}
	for _, req := range rec.requests() {
		if !strings.HasPrefix(req, "GET "+api.ProofPath+"?nonce=") || strings.Contains(req, tok) ||
			strings.Contains(strings.ToLower(req), "authorization") || strings.Contains(req, "secret-job") {
			t.Errorf("the impostor received %q", req)
		}
	}
}

// TestCLIRefusesStaleRuntimeFile: after a crash, node.json names a PID that has exited;
// the CLI does not dial the address in it (where anyone may listen now) and says no node
// runs there. Without node.json and without --api, it does not fall back to the default
// address with the data dir's token.
func TestCLIRefusesStaleRuntimeFile(t *testing.T) {
	rec := startRecorder(t)
	dataDir := t.TempDir()
	if _, err := api.LoadOrCreateToken(dataDir); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command(os.Args[0], "-test.run=^$")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	writeRuntimeFile(t, dataDir, rec.url, dead.Process.Pid, false)
	unsetEnv(t, api.EnvAPI, api.EnvToken)
	want := fmt.Sprintf("no node running in %s (stale node.json from PID %d)", dataDir, dead.Process.Pid)
	if code, _, errOut := runJobCLI(t, "status", "--data-dir", dataDir); code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("status with a stale node.json: exit %d %q; want exit 1 saying %q", code, errOut, want)
	}
	if reqs := rec.requests(); len(reqs) != 0 {
		t.Errorf("the address of a stale node.json was dialled: %q", reqs)
	}
	os.Remove(filepath.Join(dataDir, api.RuntimeFile))
	if code, _, errOut := runJobCLI(t, "jobs", "--data-dir", dataDir); code != 1 || !strings.Contains(errOut, "no node running in "+dataDir) ||
		!strings.Contains(errOut, "--api") {
		t.Errorf("jobs without node.json: exit %d %q; want exit 1 saying no node runs and naming --api", code, errOut)
	}
}

// unsetEnv unsets the variables for the test, restoring them after.
func unsetEnv(t *testing.T, names ...string) {
	for _, name := range names {
		t.Setenv(name, "")
		os.Unsetenv(name)
	}
}
