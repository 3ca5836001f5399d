package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// server answers every request with handler and records the last request. It is a node
// that holds the token "s3cret": it answers the proof challenge and checks signatures.
func server(t *testing.T, handler http.HandlerFunc) (*Client, *http.Request) {
	t.Helper()
	last := &http.Request{}
	v := NewVerifier("s3cret", "n1")
	srv := httptest.NewServer(v.SignAnswers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ProofPath {
			v.ServeProof(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if err := v.Verify(r, body); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(ErrorBody{Error: err.Error()})
			return
		}
		*last = *r.Clone(context.Background())
		r.Body = io.NopCloser(bytes.NewReader(body))
		handler(w, r)
	})))
	t.Cleanup(srv.Close)
	c, err := New(Config{Addr: srv.URL, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	return c, last
}

func TestAPIClientSignsAndDecodes(t *testing.T) {
	c, last := server(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs":
			if b, _ := io.ReadAll(r.Body); string(b) != "name: x\n" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(SubmitResult{ID: "j1"})
		case "/v1/status":
			json.NewEncoder(w).Encode(Status{ID: "n1", Peers: 2})
		}
	})
	id, err := c.Submit(context.Background(), []byte("name: x\n"), "/home/u/proj")
	if err != nil || id != "j1" {
		t.Fatalf("submit: %q %v", id, err)
	}
	auth := last.Header.Get("Authorization")
	if !strings.HasPrefix(auth, AuthScheme+" ") || strings.Contains(auth, "s3cret") || last.Header.Get(DataRootHeader) != "/home/u/proj" || last.Method != http.MethodPost {
		t.Fatalf("request headers %v", last.Header)
	}
	st, err := c.Status(context.Background())
	if err != nil || st.ID != "n1" || st.Peers != 2 {
		t.Fatalf("status: %+v %v", st, err)
	}
}

func TestAPIClientErrorCarriesServerMessage(t *testing.T) {
	c, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/jobs/nope":
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(ErrorBody{Error: "job nope not found"})
		case "/v1/raft":
			http.Error(w, "plain text trouble", http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(ErrorBody{Error: "missing or wrong API token"})
		}
	})
	_, err := c.Job(context.Background(), "nope", false)
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || err.Error() != "job nope not found" || StatusCode(err) != 404 {
		t.Fatalf("404: %v", err)
	}
	if _, err := c.Raft(context.Background()); StatusCode(err) != 503 || err.Error() != "plain text trouble" {
		t.Fatalf("503: %v", err)
	}
	if _, err := c.Peers(context.Background()); StatusCode(err) != 401 || !strings.Contains(err.Error(), TokenFile) {
		t.Fatalf("401 should say where the token comes from: %v", err)
	}
}

func TestAPIClientUnreachableAndBadAddress(t *testing.T) {
	if _, err := New(Config{Addr: "ftp://x"}); err == nil || !strings.Contains(err.Error(), "--api") {
		t.Errorf("ftp address: %v", err)
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.Listener.Addr().String()
	srv.Close()
	c, err := New(Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background()); err == nil || !strings.Contains(err.Error(), "MESHNODE_API") {
		t.Errorf("closed port: %v", err)
	}
}

func TestAPITokenCreatedOnceWithMode0600(t *testing.T) {
	dir := t.TempDir()
	tok, err := LoadOrCreateToken(dir)
	if err != nil || len(tok) != 2*tokenBytes {
		t.Fatalf("token %q, %v", tok, err)
	}
	st, err := os.Stat(filepath.Join(dir, TokenFile))
	if err != nil || (!windows() && st.Mode().Perm() != 0o600) {
		t.Fatalf("token file: %v %v", st.Mode(), err)
	}
	again, err := LoadOrCreateToken(dir)
	if err != nil || again != tok {
		t.Fatalf("second start made another token: %q %v", again, err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(matches) != 0 {
		t.Errorf("temp files left: %v", matches)
	}
	if !windows() {
		os.Chmod(filepath.Join(dir, TokenFile), 0o644)
		if _, err := ReadToken(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("world-readable token: %v", err)
		}
	}
}

// writeRuntime writes dir's RuntimeFile naming addr, as the process pid that started at
// start.
func writeRuntime(t *testing.T, dir, addr string, pid int, start uint64) {
	t.Helper()
	b, _ := json.Marshal(RuntimeInfo{ID: "n1", API: addr, PID: pid, Start: start})
	if err := os.WriteFile(filepath.Join(dir, RuntimeFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// self is this process's PID and start, as a running node writes them.
func self(t *testing.T) (int, uint64) {
	t.Helper()
	start, err := ProcessStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return os.Getpid(), start
}

func TestAPILocate(t *testing.T) {
	dir := t.TempDir()
	if cfg, err := Locate("", dir, "env-token"); err != nil || cfg.Addr != "" || cfg.Token != "env-token" {
		t.Fatalf("no node there, a token given: %+v %v", cfg, err)
	}
	tok, _ := LoadOrCreateToken(dir)
	pid, start := self(t)
	writeRuntime(t, dir, "127.0.0.1:9999", pid, start)
	if cfg, err := Locate("", dir, ""); err != nil || cfg.Addr != "127.0.0.1:9999" || cfg.Token != tok || cfg.NodeID != "n1" {
		t.Fatalf("from the data dir: %+v %v", cfg, err)
	}
	if cfg, _ := Locate("127.0.0.1:1", dir, "env-token"); cfg.Addr != "127.0.0.1:1" || cfg.Token != "env-token" {
		t.Fatalf("explicit values win: %+v", cfg)
	}
	if cfg, _ := Locate("http://localhost:7070", dir, ""); cfg.Token != tok {
		t.Fatalf("localhost gets the token: %+v", cfg)
	}
	if cfg, _ := Locate("203.0.113.7:7070", dir, ""); cfg.Token != "" {
		t.Fatalf("the local node's token was used for another machine: %+v", cfg)
	}
}

// TestStaleRuntimeFileRefused: a node.json left by a crashed node (its PID exited, or now
// another process's) is not dialled: the client says no node runs there. With no node.json
// at all, the data dir's token is not used for the default address, where anyone may
// listen.
func TestStaleRuntimeFileRefused(t *testing.T) {
	dead := exec.Command(os.Args[0], "-test.run=^$")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid, start := self(t)
	cases := []struct {
		name       string
		pid        int
		start      uint64
		why        string
		onlyOnProc bool
	}{
		{"the PID has exited", dead.Process.Pid, 0, "has exited", false},
		{"the PID is another process's", pid, start + 1, "now belongs to another process", true},
		{"no PID", 0, 0, "names no process", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.onlyOnProc && start == 0 {
				t.Skip("no process start times here")
			}
			dir := t.TempDir()
			if _, err := LoadOrCreateToken(dir); err != nil {
				t.Fatal(err)
			}
			writeRuntime(t, dir, "127.0.0.1:9999", tc.pid, tc.start)
			cfg, err := Locate("", dir, "")
			want := fmt.Sprintf("no node running in %s (stale node.json from PID %d)", dir, tc.pid)
			var stale *StaleError
			if !errors.As(err, &stale) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("Locate: %+v, %v; want an error saying %q (%s)", cfg, err, want, tc.why)
			}
			if _, err := Locate("", dir, "env-token"); !errors.As(err, &stale) {
				t.Fatalf("with MESHNODE_TOKEN: %v; want the stale file reported too", err)
			}
		})
	}
	dir := t.TempDir()
	if _, err := LoadOrCreateToken(dir); err != nil {
		t.Fatal(err)
	}
	if cfg, err := Locate("", dir, ""); !errors.Is(err, ErrNoNode) || cfg.Token != "" || !strings.Contains(err.Error(), "--api") {
		t.Fatalf("no node.json: %+v %v; want ErrNoNode naming --api, and no token used", cfg, err)
	}
}

// FuzzAnswer: whatever a server answers, the client returns an error or a value, never
// panics.
func FuzzAnswer(f *testing.F) {
	f.Add(200, []byte(`{"id":"n1","peers":1}`))
	f.Add(404, []byte(`{"error":"job x not found"}`))
	f.Add(500, []byte("not json"))
	f.Add(200, []byte(`[1,2`))
	f.Fuzz(func(t *testing.T, code int, body []byte) {
		if code < 200 || code > 599 {
			return
		}
		resp := &http.Response{StatusCode: code, Status: http.StatusText(code)}
		if code/100 != 2 {
			if err := answerError("GET", "/v1/status", resp, body); StatusCode(err) != code {
				t.Fatalf("error %v lost status %d", err, code)
			}
			return
		}
		var st Status
		_ = decodeAnswer("GET", "/v1/status", body, &st)
	})
}
