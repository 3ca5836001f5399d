package node

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus/jobspec"
	"github.com/meshnode/meshnode/internal/testutil"
	"github.com/meshnode/meshnode/model"
)

// testClient is an API client of n with the token n keeps in its data dir, found the way
// the CLI finds it.
func testClient(t testing.TB, n *Node) *api.Client {
	t.Helper()
	cfg, err := api.Locate("", n.cfg.DataDir, "")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != n.APIAddr() || cfg.Token == "" {
		t.Fatalf("located %q with token %v; the node serves %s", cfg.Addr, cfg.Token != "", n.APIAddr())
	}
	c, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawRequest sends one hand-made request to n's API and returns the status and body.
func rawRequest(t *testing.T, n *Node, method, path, body string, header http.Header, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+n.APIAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

func jobCount(t *testing.T, n *Node) int {
	t.Helper()
	jobs, err := testClient(t, n).Jobs(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

// TestAPIRefusesAttacks performs each attack on the HTTP API against a real node and
// checks that it fails, that no job was created, and that the honest client still works.
func TestAPIRefusesAttacks(t *testing.T) {
	n := startNode(t, testConfig(t))
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { return n.Consensus() != nil && n.Consensus().Leader() != "" })
	token, err := api.ReadToken(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(n.cfg.DataDir, api.TokenFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	bearer := http.Header{"Authorization": {"Bearer " + token}}
	spec := "name: attack\nmodel: {layers: 1, d_model: 8, heads: 1, context: 8}\n"

	for _, tc := range []struct {
		name, method, path string
		header             http.Header
	}{
		{"no token", "GET", "/v1/status", http.Header{}},
		{"wrong token", "GET", "/v1/jobs", http.Header{"Authorization": {"Bearer " + strings.Repeat("0", len(token))}}},
		{"token in the wrong scheme", "GET", "/v1/jobs", http.Header{"Authorization": {"Basic " + token}}},
		{"no token on metrics", "GET", "/metrics", http.Header{}},
		{"no token on submit", "POST", "/v1/jobs", http.Header{"Content-Type": {"text/plain"}}},
	} {
		if code, body := rawRequest(t, n, tc.method, tc.path, spec, tc.header, ""); code != http.StatusUnauthorized || !strings.Contains(body, "API token") {
			t.Errorf("%s: %d %s; want 401", tc.name, code, body)
		}
	}
	// The dashboard's static page and assets are public; nothing else is, however a path
	// is spelled to look like an asset.
	for _, p := range []string{"/", "/ui/app.js"} {
		if code, body := rawRequest(t, n, "GET", p, "", http.Header{}, ""); code != http.StatusOK || strings.Contains(body, token) {
			t.Errorf("GET %s without a token: %d (token in the page: %v); want 200", p, code, strings.Contains(body, token))
		}
	}
	for _, p := range []string{"/ui/../v1/status", "/ui/%2e%2e/v1/jobs", "/ui//../metrics"} {
		if code, body := rawRequest(t, n, "GET", p, "", http.Header{}, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d %s; want 401", p, code, body)
		}
	}
	if code, _ := rawRequest(t, n, "POST", "/", spec, http.Header{"Content-Type": {"text/plain"}}, ""); code != http.StatusUnauthorized {
		t.Errorf("POST / without a token: %d; want 401", code)
	}
	// A web page's form or fetch: text/plain needs no CORS preflight. It is refused even
	// if the page somehow holds the token.
	for _, h := range []http.Header{
		{"Content-Type": {"text/plain"}, "Origin": {"http://evil.example"}, "Sec-Fetch-Site": {"cross-site"}},
		{"Content-Type": {"text/plain"}, "Origin": {"http://evil.example"}},
	} {
		h.Set("Authorization", "Bearer "+token)
		if code, body := rawRequest(t, n, "POST", "/v1/jobs", spec, h, ""); code != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
			t.Errorf("cross-origin POST %v: %d %s; want 403", h, code, body)
		}
	}
	// DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends its own name.
	_, port, _ := strings.Cut(n.APIAddr(), ":")
	for _, host := range []string{"evil.example:" + port, "127.0.0.1.nip.io:" + port, "evil.example"} {
		if code, body := rawRequest(t, n, "GET", "/v1/jobs", "", bearer.Clone(), host); code != http.StatusForbidden || !strings.Contains(body, "not allowed") {
			t.Errorf("Host %s: %d %s; want 403", host, code, body)
		}
	}
	if code, body := rawRequest(t, n, "GET", "/v1/status", "", bearer.Clone(), "localhost:"+port); code != http.StatusOK {
		t.Errorf("Host localhost:%s: %d %s; want 200", port, code, body)
	}
	big := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/yaml"}}
	if code, body := rawRequest(t, n, "POST", "/v1/jobs", "name: x\n#"+strings.Repeat("x", 2<<20), big, ""); code != http.StatusRequestEntityTooLarge {
		t.Errorf("2 MiB spec: %d %s; want 413", code, body)
	}
	if _, err := testClient(t, n).Submit(context.Background(), []byte("name: x\n#"+strings.Repeat("x", 2<<20)), ""); api.StatusCode(err) != http.StatusRequestEntityTooLarge {
		t.Errorf("2 MiB spec, signed: %v; want 413", err)
	}
	if got := jobCount(t, n); got != 0 {
		t.Fatalf("%d jobs exist after the refused attacks", got)
	}
	// The honest path: the same spec through the client.
	if _, err := testClient(t, n).Submit(context.Background(), []byte(spec), ""); err != nil {
		t.Fatalf("honest submit: %v", err)
	}
	if got := jobCount(t, n); got != 1 {
		t.Fatalf("%d jobs after the honest submit, want 1", got)
	}
}

// TestAPIImpostorLearnsNothing: another local user's process on the address the client
// dials relays everything to the real node, so the challenge is answered by the node
// itself. With the Host rewritten, the proof covers the node's address, not the one the
// client dialled; with the Host kept, the node refuses it (Host allowlist). Either way the
// client refuses the impostor and sends it nothing signed; the impostor never sees the
// token. A forged signature is refused by the node.
func TestAPIImpostorLearnsNothing(t *testing.T) {
	n := startNode(t, testConfig(t))
	token, err := api.ReadToken(n.cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	target := &url.URL{Scheme: "http", Host: n.APIAddr()}
	for _, keepHost := range []bool{false, true} {
		var mu sync.Mutex
		var seen []string
		proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
			mu.Lock()
			seen = append(seen, pr.In.Method+" "+pr.In.RequestURI+" "+pr.In.Header.Get("Authorization")) // ends with " " when unsigned
			mu.Unlock()
			pr.SetURL(target)
			if keepHost {
				pr.Out.Host = pr.In.Host
			}
		}})
		c, err := api.New(api.Config{Addr: proxy.URL, Token: token, NodeID: n.ID().String(), TokenSource: "the test's data dir"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(context.Background()); !errors.Is(err, api.ErrNotTheNode) {
			t.Errorf("relaying impostor (Host kept: %v): %v; want api.ErrNotTheNode", keepHost, err)
		}
		proxy.Close()
		for _, s := range seen {
			if !strings.HasPrefix(s, "GET "+api.ProofPath+"?nonce=") || !strings.HasSuffix(s, " ") || strings.Contains(s, token) {
				t.Errorf("the impostor (Host kept: %v) received %q", keepHost, s)
			}
		}
	}
	for _, path := range []string{"/v1/status", "/v1/jobs"} {
		forged := http.Header{"Authorization": {api.AuthScheme + " ts=" + strconv.FormatInt(time.Now().Unix(), 10) +
			",nonce=" + strings.Repeat("ab", 16) + ",body=" + strings.Repeat("11", 32) + ",mac=" + strings.Repeat("00", 32)}}
		// A forged signature is refused before the body is read: a 2 MiB body gets a 401,
		// not the 413 of a body the node read.
		if code, body := rawRequest(t, n, "POST", path, strings.Repeat("x", 2<<20), forged, ""); code != http.StatusUnauthorized {
			t.Errorf("forged signature on %s: %d %s; want 401", path, code, body)
		}
	}
	if _, err := testClient(t, n).Status(context.Background()); err != nil {
		t.Fatalf("the honest client: %v", err)
	}
}

// TestSubmitRefusesLocalFilesOutsideTheDataRoot submits jobs naming system files; each is
// refused with a 400 naming data.source, and nothing is published.
func TestSubmitRefusesLocalFilesOutsideTheDataRoot(t *testing.T) {
	n := startNode(t, testConfig(t))
	testutil.WaitFor(t, 20*time.Second, "a leader", func() bool { return n.Consensus() != nil && n.Consensus().Leader() != "" })
	c := testClient(t, n)
	root := t.TempDir()
	os.Symlink("/etc/passwd", filepath.Join(root, "passwd"))
	os.Symlink("/dev/zero", filepath.Join(root, "zero"))
	for _, tc := range []struct{ source, root, want string }{
		{"/etc/passwd", root, "outside the allowed data roots"},
		{"/etc/passwd", "/", "outside the allowed data roots"}, // a client cannot make / its root
		{"/etc/passwd", "", "outside the allowed data roots"},
		{filepath.Join(root, "passwd"), root, "outside the allowed data roots"}, // symlinks are resolved
		{"/dev/zero", root, "outside the allowed data roots"},
		{filepath.Join(root, "zero"), root, "outside the allowed data roots"},
		{"/dev/zero", "/dev", "not a regular file"},
		{"relative.txt", root, "not an absolute path"},
	} {
		spec := "data: {source: " + tc.source + "}\nmodel: {layers: 1, d_model: 8, heads: 1, context: 8}\n"
		_, err := c.Submit(context.Background(), []byte(spec), tc.root)
		if api.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "data.source: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("data.source %s under root %q: %v; want 400 naming data.source: %s", tc.source, tc.root, err, tc.want)
		}
	}
	if got := jobCount(t, n); got != 0 {
		t.Fatalf("%d jobs were created", got)
	}
}

// TestPublishDatasetLimits: a configured data root admits its files, a file over the size
// cap is refused, and a cancelled request reads nothing.
func TestPublishDatasetLimits(t *testing.T) {
	cfg := testConfig(t)
	cfg.Consensus.Disabled = true
	cfg.DataRoots = []string{t.TempDir()}
	cfg.MaxDataBytes = 1000
	n := startNode(t, cfg)
	small, large := filepath.Join(cfg.DataRoots[0], "small.txt"), filepath.Join(cfg.DataRoots[0], "large.txt")
	os.WriteFile(small, bytes.Repeat([]byte("a"), 1000), 0o600)
	os.WriteFile(large, bytes.Repeat([]byte("a"), 1001), 0o600)
	ctx := context.Background()
	if _, _, err := n.PublishDataset(ctx, jobspec.Data{Source: small}, 256, ""); err != nil {
		t.Fatalf("a file under a configured root, at the cap: %v", err)
	}
	if _, _, err := n.PublishDataset(ctx, jobspec.Data{Source: large}, 256, ""); !errors.Is(err, model.ErrBadData) || !strings.Contains(err.Error(), "data.source: ") || !strings.Contains(err.Error(), "limit of 1000") {
		t.Errorf("a file over the cap: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := n.PublishDataset(cancelled, jobspec.Data{Source: small}, 256, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("publish with a cancelled context: %v, want context.Canceled", err)
	}
}
