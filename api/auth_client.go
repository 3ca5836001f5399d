package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"time"
)

// maxProofAnswer bounds the answer to a challenge the client reads.
const maxProofAnswer = 4 << 10

// newNonce returns 16 random bytes, hex-encoded.
func newNonce() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("API nonce: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// prove makes the process at c's address prove, once per client, that it holds c's token:
// it sends a fresh nonce (and nothing derived from the token) and checks the MAC of the
// answer over that nonce, the Host it dialled and the node ID.
func (c *Client) prove(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proven {
		return nil
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+ProofPath+"?nonce="+url.QueryEscape(nonce), nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", ProofPath, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.unreachable(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxProofAnswer))
	if err != nil {
		return c.notTheNode("its answer to the challenge could not be read: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return c.notTheNode("it answered %s to the challenge", resp.Status)
	}
	var p Proof
	if err := json.Unmarshal(data, &p); err != nil {
		return c.notTheNode("its answer to the challenge is not a proof")
	}
	got, err := hex.DecodeString(p.MAC)
	if err != nil || !hmac.Equal(got, proofMAC(c.token, nonce, c.host, p.NodeID)) {
		return c.notTheNode("it could not prove it holds the token")
	}
	if c.nodeID != "" && p.NodeID != c.nodeID {
		return c.notTheNode("it is node %s, the runtime file names %s", p.NodeID, c.nodeID)
	}
	c.proven = true
	return nil
}

// notTheNode is the error of a failed proof: it names the address, whose node the client
// expected (the data dir, or where the token came from) and why, and says that nothing
// derived from the token was sent.
func (c *Client) notTheNode(format string, args ...any) error {
	whose := "that holds the API token"
	switch {
	case filepath.Base(c.tokenSource) == TokenFile:
		whose = "of data dir " + filepath.Dir(c.tokenSource)
	case c.tokenSource != "":
		whose = "whose token is in " + c.tokenSource
	}
	return fmt.Errorf("the process at %s is not the meshnode node %s: %s; nothing derived from the token was sent to it (is the node running? check --api and --data-dir): %w",
		c.base, whose, fmt.Sprintf(format, args...), ErrNotTheNode)
}

// sign sets req's Authorization to its AuthScheme signature, body being its whole body,
// and returns the signature's MAC, to which the node's answer is bound.
func (c *Client) sign(req *http.Request, body []byte) ([]byte, error) {
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	sig := signature{ts: time.Now().Unix(), nonce: nonce, bodySum: sha256.Sum256(body)}
	sig.mac = requestMAC(c.token, req.Method, req.URL.RequestURI(), req.Host, sig.ts, nonce, sig.bodySum)
	req.Header.Set("Authorization", sig.String())
	// The node signs the bytes it sends; Go's transport would ask for gzip and hand back
	// other bytes than those (promhttp compresses when asked).
	req.Header.Set("Accept-Encoding", "identity")
	return sig.mac, nil
}

// checkAnswer checks the AnswerTrailer of a successful answer to the request whose MAC is
// reqMAC: only the node that proved itself can have made it.
func (c *Client) checkAnswer(resp *http.Response, reqMAC, body []byte) error {
	got, err := hex.DecodeString(resp.Trailer.Get(AnswerTrailer))
	if err != nil || !hmac.Equal(got, answerMAC(c.token, reqMAC, resp.StatusCode, sha256.Sum256(body))) {
		return fmt.Errorf("the answer from %s is not signed by the node that proved it holds the token (did another process take the address?): %w",
			c.base, ErrNotTheNode)
	}
	return nil
}
