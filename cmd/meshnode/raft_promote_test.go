package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/meshnode/meshnode/api"
)

// TestRaftPromoteRefuseCLI: `raft promote|refuse ID` POST to the node's API, signed with
// the token, and print the decision (as JSON with -o json); the API's 400 is the command's error.
func TestRaftPromoteRefuseCLI(t *testing.T) {
	var paths, auth []string
	v := api.NewVerifier("t0ken", "") // a fake node that holds the token: it proves it and checks signatures
	srv := httptest.NewServer(v.SignAnswers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.ProofPath {
			v.ServeProof(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		verdict := "signed"
		if err := v.Verify(r, body); err != nil {
			verdict = err.Error()
		}
		paths, auth = append(paths, r.Method+" "+r.URL.Path), append(auth, verdict)
		w.Header().Set("Content-Type", "application/json")
		verb, id, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/v1/raft/"), "/")
		if id == "voter" {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "bad request: voter is already a voter; promote and refuse apply to non-voters"})
			return
		}
		decision, suffrage := "approved", "voter"
		if verb == "refuse" {
			decision, suffrage = "refused", "nonvoter"
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"id": id, "decision": decision, "suffrage": suffrage})
	})))
	t.Cleanup(srv.Close)
	t.Setenv("MESHNODE_API", srv.URL)
	t.Setenv("MESHNODE_TOKEN", "t0ken")
	code, out, errOut := runJobCLI(t, "raft", "promote", "n1", "-o", "json")
	if code != 0 || !strings.Contains(out, `"decision":"approved"`) || !strings.Contains(out, `"suffrage":"voter"`) {
		t.Fatalf("promote: exit %d out %q err %q", code, out, errOut)
	}
	code, out, errOut = runJobCLI(t, "raft", "refuse", "n2")
	if code != 0 || strings.TrimSpace(out) != "n2: refused, now a nonvoter" {
		t.Fatalf("refuse: exit %d out %q err %q", code, out, errOut)
	}
	code, _, errOut = runJobCLI(t, "raft", "refuse", "voter")
	if code == 0 || !strings.Contains(errOut, "already a voter") {
		t.Fatalf("refuse a voter: exit %d err %q", code, errOut)
	}
	if want := "POST /v1/raft/promote/n1 POST /v1/raft/refuse/n2 POST /v1/raft/refuse/voter"; strings.Join(paths, " ") != want || auth[0] != "signed" {
		t.Fatalf("requests %v with %v; want %s signed with the token", paths, auth, want)
	}
}
