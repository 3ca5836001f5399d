package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"
)

// maxSeenNonces bounds the nonces a Verifier remembers within SignatureWindow: beyond it,
// signed requests are refused until older nonces expire (a local client sending more than
// ~1000 signed requests a second for a minute).
const maxSeenNonces = 1 << 16

// Verifier is the node's side of the token-proof scheme: it answers challenges and checks
// signed requests, refusing replays. It is safe for concurrent use.
type Verifier struct {
	token  string
	nodeID string
	now    func() time.Time

	mu        sync.Mutex
	seen      map[string]time.Time // nonce → when it may be forgotten
	pruneNext int                  // prune expired nonces when seen reaches this size
}

// NewVerifier returns the verifier of a node that holds token and is known as nodeID.
func NewVerifier(token, nodeID string) *Verifier {
	return &Verifier{token: token, nodeID: nodeID, now: time.Now, seen: map[string]time.Time{}, pruneNext: 1024}
}

// Prove returns the Proof that answers nonce for a client that reached the node as host.
func (v *Verifier) Prove(nonce, host string) (Proof, error) {
	if !validNonce(nonce) {
		return Proof{}, errors.New("nonce must be 32 to 128 lower-case hex digits")
	}
	return Proof{NodeID: v.nodeID, MAC: hex.EncodeToString(proofMAC(v.token, nonce, host, v.nodeID))}, nil
}

// ServeProof answers GET ProofPath?nonce=… with the Proof for the request's Host (the
// caller checks Host against its allowlist first).
func (v *Verifier) ServeProof(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	p, err := v.Prove(r.URL.Query().Get("nonce"), r.Host)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(ErrorBody{Error: err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(p)
}

// IsSigned reports whether r claims the AuthScheme (it may still be invalid).
func IsSigned(r *http.Request) bool {
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	return strings.EqualFold(scheme, AuthScheme)
}

// Verify checks r's AuthScheme signature (VerifyHead) and that body, the request's whole
// body, is the one it signed.
func (v *Verifier) Verify(r *http.Request, body []byte) error {
	sum, err := v.VerifyHead(r)
	if err != nil {
		return err
	}
	if sha256.Sum256(body) != sum {
		return errors.New("the request's body is not the one it signed")
	}
	return nil
}

// VerifyHead checks r's AuthScheme signature before its body is read: the MAC must match,
// its time be within SignatureWindow of the node's clock, and its nonce not seen before.
// It returns the SHA-256 the signature claims for the body, which the caller must compare
// with the body it reads. A valid request's nonce is remembered, so the same request is
// refused next time.
func (v *Verifier) VerifyHead(r *http.Request) ([sha256.Size]byte, error) {
	sig, err := parseSignature(r.Header.Get("Authorization"))
	if err != nil {
		return sig.bodySum, err
	}
	now := v.now()
	if d := now.Sub(time.Unix(sig.ts, 0)); d > SignatureWindow || d < -SignatureWindow {
		return sig.bodySum, errors.New("signed request out of its time window (check the clock)")
	}
	want := requestMAC(v.token, r.Method, r.RequestURI, r.Host, sig.ts, sig.nonce, sig.bodySum)
	if !hmac.Equal(sig.mac, want) {
		return sig.bodySum, errors.New("wrong request signature")
	}
	return sig.bodySum, v.remember(sig.nonce, now)
}

// remember records nonce until it can no longer be inside the window, or refuses it when
// it was seen already.
func (v *Verifier) remember(nonce string, now time.Time) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if exp, ok := v.seen[nonce]; ok && now.Before(exp) {
		return errors.New("replayed request (its nonce was used before)")
	}
	if len(v.seen) >= v.pruneNext {
		for n, exp := range v.seen {
			if !now.Before(exp) {
				delete(v.seen, n)
			}
		}
		v.pruneNext = max(1024, 2*len(v.seen))
	}
	if len(v.seen) >= maxSeenNonces {
		return errors.New("too many signed requests in the last minute")
	}
	v.seen[nonce] = now.Add(2 * SignatureWindow)
	return nil
}
