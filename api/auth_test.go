package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// impostor is a plain HTTP server on a random port that records everything it receives.
type impostor struct {
	mu       sync.Mutex
	requests []string // method, target, headers and body of each request
	paths    []string
	srv      *httptest.Server
}

func startImpostor(t *testing.T, answer http.HandlerFunc) *impostor {
	t.Helper()
	im := &impostor{}
	im.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b strings.Builder
		b.WriteString(r.Method + " " + r.RequestURI + "\n")
		r.Header.Write(&b)
		b.Write(body)
		im.mu.Lock()
		im.requests = append(im.requests, b.String())
		im.paths = append(im.paths, r.URL.Path)
		im.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(im.srv.Close)
	return im
}

// learned fails t if the impostor saw the token, an Authorization header, or any request
// but the challenge.
func (im *impostor) learnedNothing(t *testing.T, token string) {
	t.Helper()
	im.mu.Lock()
	defer im.mu.Unlock()
	for i, req := range im.requests {
		if strings.Contains(req, token) || strings.Contains(strings.ToLower(req), "authorization:") || im.paths[i] != ProofPath {
			t.Errorf("the impostor received %q", req)
		}
	}
}

// TestImpostorGetsNoToken: a process that is not the node listens on the API address (any
// local user can, while no node runs). Whatever it answers to the challenge, the client
// refuses it with a message naming the address and the token's source, and the impostor
// receives nothing but the challenge: not the token, no signed request, no job spec.
func TestImpostorGetsNoToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	real := httptest.NewServer(http.HandlerFunc(NewVerifier(token, "n1").ServeProof))
	t.Cleanup(real.Close)
	cases := map[string]http.HandlerFunc{
		"answers 404": http.NotFound,
		"answers 200 to everything": func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"node_id":"n1","mac":"00"}`))
		},
		"a proof with a guessed MAC": func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"node_id":"n1","mac":"` + strings.Repeat("ab", 32) + `"}`))
		},
		// It asks the real node (elsewhere) to answer the client's challenge: the proof
		// covers the address the real node was reached at, not the impostor's.
		"relays the challenge to the real node": func(w http.ResponseWriter, r *http.Request) {
			resp, err := http.Get(real.URL + r.RequestURI)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			io.Copy(w, resp.Body)
		},
	}
	for name, answer := range cases {
		t.Run(name, func(t *testing.T) {
			im := startImpostor(t, answer)
			c, err := New(Config{Addr: im.srv.URL, Token: token, TokenSource: "/d/" + TokenFile})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Submit(context.Background(), []byte("name: secret-job\n"), "/home/u")
			if !errors.Is(err, ErrNotTheNode) || !strings.Contains(err.Error(), "is not the meshnode node of data dir /d:") ||
				!strings.Contains(err.Error(), strings.TrimPrefix(im.srv.URL, "http://")) {
				t.Fatalf("submit to an impostor: %v; want ErrNotTheNode naming the address and the token file", err)
			}
			if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotTheNode) {
				t.Fatalf("second request: %v", err)
			}
			im.learnedNothing(t, token)
		})
	}
}

// TestProofNamesTheNode: a node that proves the token but is another node than the
// runtime file names (same token copied to two data dirs) is refused.
func TestProofNamesTheNode(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(NewVerifier(token, "other").ServeProof))
	t.Cleanup(srv.Close)
	c, _ := New(Config{Addr: srv.URL, Token: token, NodeID: "n1"})
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotTheNode) || !strings.Contains(err.Error(), "node other") {
		t.Fatalf("%v; want ErrNotTheNode naming the node", err)
	}
}

// signedRequest is a request to the verifier's node signed as the client signs it.
func signedRequest(t *testing.T, token, method, target, body string) *http.Request {
	t.Helper()
	c, err := New(Config{Addr: "127.0.0.1:7070", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Host, req.URL.Host = "127.0.0.1:7070", "127.0.0.1:7070"
	if _, err := c.sign(req, []byte(body)); err != nil {
		t.Fatal(err)
	}
	return req
}

// TestVerifierRefusesForgedAndReplayedRequests: what a listener could capture from a signed
// request is useless to it: the same request again is refused, and so is one with another
// body, path, host or time, or signed with another token.
func TestVerifierRefusesForgedAndReplayedRequests(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	v := NewVerifier(token, "n1")
	req := signedRequest(t, token, "POST", "/v1/jobs?x=1", "name: a\n")
	if err := v.Verify(req, []byte("name: a\n")); err != nil {
		t.Fatalf("honest request: %v", err)
	}
	if err := v.Verify(req, []byte("name: a\n")); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Errorf("replayed request: %v", err)
	}
	fresh := func() *http.Request { return signedRequest(t, token, "POST", "/v1/jobs?x=1", "name: a\n") }
	if err := v.Verify(fresh(), []byte("name: b\n")); err == nil {
		t.Error("another body accepted")
	}
	r := fresh()
	r.RequestURI = "/v1/jobs/j1"
	if err := v.Verify(r, []byte("name: a\n")); err == nil {
		t.Error("another path accepted")
	}
	r = fresh()
	r.Method = "DELETE"
	if err := v.Verify(r, []byte("name: a\n")); err == nil {
		t.Error("another method accepted")
	}
	r = fresh()
	r.Host = "127.0.0.1:7071"
	if err := v.Verify(r, []byte("name: a\n")); err == nil {
		t.Error("another host accepted")
	}
	if err := v.Verify(signedRequest(t, "another-token-another-token-0000", "POST", "/v1/jobs?x=1", "name: a\n"), []byte("name: a\n")); err == nil {
		t.Error("another token accepted")
	}
	late := NewVerifier(token, "n1")
	late.now = func() time.Time { return time.Now().Add(SignatureWindow + 5*time.Second) }
	if err := late.Verify(fresh(), []byte("name: a\n")); err == nil || !strings.Contains(err.Error(), "time window") {
		t.Errorf("a request captured more than a window ago: %v", err)
	}
	r = fresh()
	r.Header.Set("Authorization", strings.Replace(r.Header.Get("Authorization"), "nonce=", "nonce=zz", 1))
	if err := v.Verify(r, []byte("name: a\n")); err == nil {
		t.Error("a malformed nonce accepted")
	}
}

// FuzzSignature: whatever an Authorization header holds, parsing it returns a signature
// or an error, never panics.
func FuzzSignature(f *testing.F) {
	f.Add(AuthScheme + " ts=1700000000,nonce=" + strings.Repeat("ab", 16) + ",body=" + strings.Repeat("ef", 32) + ",mac=" + strings.Repeat("cd", 32))
	f.Add("Bearer x")
	f.Add(AuthScheme + " ts=,nonce=,mac=,=,,")
	f.Fuzz(func(t *testing.T, h string) {
		if s, err := parseSignature(h); err == nil && (len(s.mac) != 32 || !validNonce(s.nonce)) {
			t.Fatalf("accepted %q as %+v", h, s)
		}
	})
}

// TestAnswersAreSigned: a process that took the address after the node proved itself (the
// node died, another user bound the port) answers in its place: an unsigned answer, or a
// signed answer captured earlier and replayed for another request, is refused.
func TestAnswersAreSigned(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	v := NewVerifier(token, "n1")
	var mu sync.Mutex
	var calls int
	var captured string
	honest := v.SignAnswers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"n1"}`))
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == ProofPath {
			v.ServeProof(w, r)
			return
		}
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1: // the node answers, and the future impostor records its answer
			rec := httptest.NewRecorder()
			honest.ServeHTTP(rec, r)
			captured = rec.Header().Get(AnswerTrailer)
			w.Header().Set("Trailer", AnswerTrailer)
			w.Write(rec.Body.Bytes())
			w.Header().Set(AnswerTrailer, captured)
		case 2: // the impostor replays it
			w.Header().Set("Trailer", AnswerTrailer)
			w.Write([]byte(`{"id":"n1"}`))
			w.Header().Set(AnswerTrailer, captured)
		default: // the impostor answers unsigned
			w.Write([]byte(`{"id":"n1"}`))
		}
	}))
	t.Cleanup(srv.Close)
	c, _ := New(Config{Addr: srv.URL, Token: token})
	if st, err := c.Status(context.Background()); err != nil || st.ID != "n1" {
		t.Fatalf("the node's signed answer: %+v %v", st, err)
	}
	for _, what := range []string{"a replayed answer", "an unsigned answer"} {
		if _, err := c.Status(context.Background()); !errors.Is(err, ErrNotTheNode) || !strings.Contains(err.Error(), "not signed by the node") {
			t.Errorf("%s: %v; want it refused", what, err)
		}
	}
}
