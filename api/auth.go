package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The API's token-proof scheme (docs/security.md, "The token stays home"). The token is a
// key, never a password on the wire: a client first asks the process at the API address to
// prove that it holds the token (a MAC over the client's fresh nonce and the address the
// client dialled), and then signs each request with a MAC over its method, target, host,
// time, a fresh nonce and its body's hash. A process that is not the node learns neither
// the token nor anything it could replay; a node refuses a signed request it has seen
// before or whose time is off by more than SignatureWindow.
const (
	// ProofPath is the one API path served without authentication besides the dashboard's
	// static files: GET ProofPath?nonce=<hex> answers a Proof.
	ProofPath = "/v1/auth/proof"
	// AuthScheme is the Authorization scheme of a signed request:
	// "Meshnode-HMAC ts=<unix seconds>,nonce=<hex>,body=<hex SHA-256 of the body>,mac=<hex>".
	// The body's hash is in the header so that a node checks the MAC before it reads the
	// body: only a holder of the token makes it read one.
	AuthScheme = "Meshnode-HMAC"
	// SignatureWindow is how far a signed request's time may be from the node's clock.
	SignatureWindow = time.Minute
)

// Nonces (the client's challenge and each request's nonce) are 16 to 64 random bytes,
// hex-encoded.
const (
	minNonceHex = 32
	maxNonceHex = 128
)

// Domain separation: a proof can never be taken for a request signature, nor the reverse.
const (
	proofLabel   = "meshnode-api-proof/1"
	requestLabel = "meshnode-api-request/1"
)

// Proof is a node's answer to GET ProofPath: its ID and
// hex(HMAC-SHA256(token, proofLabel \n nonce \n host \n node_id)), where host is the Host
// the client dialled.
type Proof struct {
	NodeID string `json:"node_id"`
	MAC    string `json:"mac"`
}

// ErrNotTheNode is wrapped by the error of a client whose API address is served by a
// process that cannot prove it holds the client's token: not the node of that data dir.
var ErrNotTheNode = errors.New("not the node that holds this API token")

// proofMAC is the MAC a node that holds token answers to nonce when reached as host.
func proofMAC(token, nonce, host, nodeID string) []byte {
	return mac(token, proofLabel, nonce, host, nodeID)
}

// requestMAC is the MAC of a signed request: method, request target (path and query, as
// sent), Host, time, nonce and the SHA-256 of the body.
func requestMAC(token, method, target, host string, ts int64, nonce string, bodySum [sha256.Size]byte) []byte {
	return mac(token, requestLabel, method, target, host, strconv.FormatInt(ts, 10), nonce, hex.EncodeToString(bodySum[:]))
}

// mac is HMAC-SHA256 keyed by token over the fields, each ended by a newline (no field
// holds one: they are a label, an HTTP method, a request target, a Host, hex or digits).
func mac(token string, fields ...string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	for _, f := range fields {
		m.Write([]byte(f))
		m.Write([]byte{'\n'})
	}
	return m.Sum(nil)
}

// validNonce reports whether s is a nonce of acceptable length made of lower-case hex.
func validNonce(s string) bool {
	if len(s) < minNonceHex || len(s) > maxNonceHex || len(s)%2 != 0 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// signature is a parsed AuthScheme Authorization header.
type signature struct {
	ts      int64
	nonce   string
	bodySum [sha256.Size]byte
	mac     []byte
}

func (s signature) String() string {
	return fmt.Sprintf("%s ts=%d,nonce=%s,body=%s,mac=%s", AuthScheme, s.ts, s.nonce, hex.EncodeToString(s.bodySum[:]), hex.EncodeToString(s.mac))
}

// parseSignature parses the value of an Authorization header of scheme AuthScheme.
func parseSignature(h string) (signature, error) {
	var s signature
	hasBody := false
	scheme, params, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, AuthScheme) {
		return s, fmt.Errorf("not a %s authorization", AuthScheme)
	}
	for _, kv := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		var err error
		switch k {
		case "ts":
			s.ts, err = strconv.ParseInt(v, 10, 64)
		case "nonce":
			s.nonce = v
			if !validNonce(v) {
				err = errors.New("bad nonce")
			}
		case "body":
			var sum []byte
			if sum, err = hex.DecodeString(v); err == nil && len(sum) != sha256.Size {
				err = errors.New("not a SHA-256")
			}
			copy(s.bodySum[:], sum)
			hasBody = err == nil
		case "mac":
			s.mac, err = hex.DecodeString(v)
		default:
			err = fmt.Errorf("unknown parameter %q", k)
		}
		if err != nil {
			return s, fmt.Errorf("%s authorization: %s: %w", AuthScheme, k, err)
		}
	}
	if s.nonce == "" || !hasBody || len(s.mac) != sha256.Size {
		return s, fmt.Errorf("%s authorization: needs ts, nonce, body and mac", AuthScheme)
	}
	return s, nil
}
