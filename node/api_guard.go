package node

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/meshnode/meshnode/api"
	"github.com/meshnode/meshnode/consensus/jobspec"
)

// apiMaxBody bounds every request body: the largest is a job spec.
const apiMaxBody = jobspec.MaxSpecBytes

// apiGuard is what every API request passes before a handler sees it, in this order:
//
//  1. the Host header is one of the allowed names (loopback with the bound port, plus
//     configured ones): a DNS-rebound name pointing at 127.0.0.1 is refused (403);
//  2. Go's cross-origin protection: a browser's cross-site non-GET request (a form or a
//     fetch with text/plain, which needs no CORS preflight) is refused (403);
//  3. the challenge of api.ProofPath is answered without authentication (it proves the node
//     holds the token to a client about to sign requests with it, api/auth.go);
//  4. the token (401 without it), except for the dashboard's static page and assets (GET /
//     and /ui/), which hold no data. Two schemes carry it: a request signed with the token
//     (api.AuthScheme: the CLI, the testnet and every api.Client, which never send the
//     token itself; the signature is checked before the body is read, then the body,
//     read whole within apiMaxBody bytes, against the hash it signed; a replayed
//     signature is refused), or the bearer token, compared in constant
//     time (the dashboard, which reads it from its URL fragment, and scrapers such as
//     Prometheus given the token file); the answer to a signed request is signed in a
//     trailer (api.AnswerTrailer), bound to the request;
//  5. the body is cut at apiMaxBody bytes.
type apiGuard struct {
	tokenSum [sha256.Size]byte
	verifier *api.Verifier
	hosts    []string
	cop      *http.CrossOriginProtection
	log      *slog.Logger
}

func newAPIGuard(token, nodeID string, hosts []string, log *slog.Logger) *apiGuard {
	g := &apiGuard{tokenSum: sha256.Sum256([]byte(token)), verifier: api.NewVerifier(token, nodeID), hosts: hosts,
		cop: http.NewCrossOriginProtection(), log: log}
	g.cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.log.Warn("API: refused a cross-origin request", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
		replyError(w, http.StatusForbidden, errors.New("cross-origin request refused: the meshnode API serves local tools, not web pages"))
	}))
	return g
}

// allowedHosts is the Host allowlist of an API bound at bound: 127.0.0.1, localhost and
// [::1] with its port, the bound address itself, and extra (host:port values).
func allowedHosts(bound string, extra []string) []string {
	out := []string{strings.ToLower(bound)}
	if _, port, err := net.SplitHostPort(bound); err == nil {
		for _, h := range []string{"127.0.0.1", "localhost", "::1"} {
			out = append(out, net.JoinHostPort(h, port))
		}
	}
	for _, h := range extra {
		out = append(out, strings.ToLower(h))
	}
	return out
}

func (g *apiGuard) wrap(next http.Handler) http.Handler {
	inner := g.cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == api.ProofPath:
			g.verifier.ServeProof(w, r)
			return
		case api.IsSigned(r):
			if !g.verifySigned(w, r) {
				return
			}
			g.verifier.SignAnswers(next).ServeHTTP(w, r) // the body is already bounded
			return
		case !publicPath(r) && !g.authorized(r):
			g.unauthorized(w, errors.New("missing or wrong API token (sign the request as the meshnode CLI does, or send Authorization: Bearer <token>)"))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, apiMaxBody)
		}
		next.ServeHTTP(w, r)
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(g.hosts, strings.ToLower(r.Host)) {
			g.log.Warn("API: refused a request for a foreign Host", "host", r.Host, "path", r.URL.Path)
			replyError(w, http.StatusForbidden, fmt.Errorf("host %q is not allowed (allowed: %s; add names with --api-host)",
				r.Host, strings.Join(g.hosts, ", ")))
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// verifySigned checks r's signature, then reads r's body whole (at most apiMaxBody bytes)
// and checks it is the one signed: only a holder of the token makes the node read a body.
// On success r's body is the bytes read; else the answer is written (401, or 413 for a
// body too large) and it returns false.
func (g *apiGuard) verifySigned(w http.ResponseWriter, r *http.Request) bool {
	sum, err := g.verifier.VerifyHead(r)
	if err != nil {
		g.log.Warn("API: refused a signed request", "method", r.Method, "path", r.URL.Path, "err", err)
		g.unauthorized(w, err)
		return false
	}
	var body []byte
	if r.Body != nil {
		if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, apiMaxBody)); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				replyError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", apiMaxBody))
			} else {
				replyError(w, http.StatusBadRequest, fmt.Errorf("read request body: %w", err))
			}
			return false
		}
	}
	if sha256.Sum256(body) != sum {
		g.unauthorized(w, errors.New("the request's body is not the one it signed"))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

func (g *apiGuard) unauthorized(w http.ResponseWriter, err error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="meshnode"`)
	replyError(w, http.StatusUnauthorized, err)
}

// authorized reports whether r carries the token. Both sides are hashed first, so the
// comparison takes the same time whatever the presented token's length.
func (g *apiGuard) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], g.tokenSum[:]) == 1
}

// publicPath reports whether r asks for the dashboard's static page or assets, the only
// resources served without the token. They are the same bytes for everyone and carry no
// node data; every request the page then makes for data needs the token.
func publicPath(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p == "/" || (strings.HasPrefix(p, "/ui/") && path.Clean(p) == p && !strings.Contains(r.URL.RawPath, "%"))
}
