package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result()
}

func TestPageAndEveryAssetItNamesAreServed(t *testing.T) {
	h := Handler()
	resp := get(t, h, "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<title>meshnode</title>") {
		t.Fatalf("GET / = %d, body %.80q", resp.StatusCode, body)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/ui/[^"]+)"`).FindAllStringSubmatch(string(body), -1)
	if len(refs) < 2 {
		t.Fatalf("the page names %d assets, want its script and stylesheet", len(refs))
	}
	for _, m := range refs {
		if r := get(t, h, m[1]); r.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d", m[1], r.StatusCode)
		}
	}
}

func TestEveryResponseCarriesTheSecurityHeaders(t *testing.T) {
	h := Handler()
	for _, path := range []string{"/", "/ui/app.js", "/ui/missing.js"} {
		resp := get(t, h, path)
		if got := resp.Header.Get("Content-Security-Policy"); got != contentSecurityPolicy {
			t.Errorf("GET %s: CSP %q", path, got)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: framing/nosniff headers missing: %v", path, resp.Header)
		}
	}
}

func TestOnlyThePageAndItsAssetsAreServed(t *testing.T) {
	h := Handler()
	for _, path := range []string{"/v1/status", "/static/index.html", "/ui/../dashboard.go", "/index.html/x"} {
		if r := get(t, h, path); r.StatusCode == http.StatusOK {
			t.Errorf("GET %s = 200, want it not served by the dashboard", path)
		}
	}
}

// The script must not build HTML from strings (the API's job names, events and errors come
// from other members and users): the page uses DOM nodes and textContent only.
func TestScriptNeverAssignsHTML(t *testing.T) {
	b, err := files.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		if strings.Contains(string(b), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}
